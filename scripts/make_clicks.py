#!/usr/bin/python3
"""Writes click logs in Criteo's layout (data.dataset: criteo), with a signal planted in them.

One impression per line, 40 tab-separated fields: the label, 13 integer counts, 26 categorical
values as 8-digit hexadecimal hashes; 5% of the counts and 3% of the categorical values are empty,
as in Criteo's files. Each categorical feature draws its values from a vocabulary of --vocabulary
values by Zipf's law (a few values are most of the impressions, as in real logs). The click
probability is sigmoid(bias + the effects of the values of C1..C8 + a weighting of log counts
I1..I6): the other features are noise, and a model that learns the effects ranks clicks above
non-clicks (AUC about 0.8 where a guess gets 0.5).

    /usr/bin/python3 scripts/make_clicks.py OUT.tsv --rows 100000 --seed 0
"""
import argparse
import math
import os
import sys

import numpy as np

DENSE, CATEGORICAL = 13, 26


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the file to write")
    parser.add_argument("--rows", type=int, default=100000, help="impressions (default 100000)")
    parser.add_argument("--seed", type=int, default=0, help="the same seed writes the same file")
    parser.add_argument("--vocabulary", type=int, default=10000, help="distinct values per categorical feature")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the values' frequencies")
    parser.add_argument("--model-seed", type=int, default=1234,
                        help="seed of the planted effects: files of different --seed share them (train and test)")
    args = parser.parse_args()
    # One line each, as argparse says them (exit 2), not a traceback from numpy or open().
    if args.rows < 1:
        parser.error(f"--rows: expected at least 1, got {args.rows}")
    if args.vocabulary < 2:
        parser.error(f"--vocabulary: expected at least 2, got {args.vocabulary}")
    if not math.isfinite(args.zipf):
        parser.error(f"--zipf: expected a finite exponent (1.1 is typical, 0 uniform), got {args.zipf}")
    if os.path.isdir(args.output):
        parser.error(f"{args.output} is a directory: name the file to write")

    truth = np.random.default_rng(args.model_seed)  # the world: shared by every file of this model seed
    effects = truth.normal(0.0, 0.7, (CATEGORICAL, args.vocabulary))
    effects[8:] = 0.0
    hashes = truth.integers(1, 2**32, (CATEGORICAL, args.vocabulary))  # 0 would read as missing
    weights = np.zeros(DENSE)
    weights[:6] = truth.normal(0.0, 0.5, 6)

    rng = np.random.default_rng(args.seed)
    n = args.rows
    ranks = np.arange(args.vocabulary, dtype=np.float64)
    cdf = np.cumsum((ranks + 1.0) ** -args.zipf)
    cdf /= cdf[-1]
    values = np.minimum(np.searchsorted(cdf, rng.random((n, CATEGORICAL))), args.vocabulary - 1)
    counts = np.floor(np.exp(rng.normal(1.0, 1.5, (n, DENSE)))).astype(np.int64) - 1  # heavy-tailed, some -1
    logit = -1.0 + effects[np.arange(CATEGORICAL), values].sum(axis=1)
    logit += (np.log1p(np.maximum(counts, 0)) - 1.0) @ weights
    labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    dense_missing = rng.random((n, DENSE)) < 0.05
    categorical_missing = rng.random((n, CATEGORICAL)) < 0.03

    try:
        write(args.output, labels, counts, values, hashes, dense_missing, categorical_missing)
    except OSError as e:
        sys.exit(f"make_clicks: {args.output}: {e.strerror or e}")
    print(f"{args.rows} impressions, {labels.mean():.3f} clicked, written to {args.output}")


def write(output, labels, counts, values, hashes, dense_missing, categorical_missing):
    n = len(labels)
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    with open(output, "w") as out:
        for i in range(n):
            fields = [str(labels[i])]
            fields += ["" if dense_missing[i, j] else str(counts[i, j]) for j in range(DENSE)]
            fields += ["" if categorical_missing[i, f] else "%08x" % hashes[f, values[i, f]] for f in range(CATEGORICAL)]
            out.write("\t".join(fields) + "\n")


if __name__ == "__main__":
    main()
