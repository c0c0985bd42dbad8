#pragma once
// Upper bounds shared by options and config keys of one kind: far above any real run, far below
// overflow (step and epoch counts multiply into int64 step totals; seconds become milliseconds).

namespace ddp {

inline constexpr double kMaxSteps = 1e12;                 ///< optimizer steps, in any key that counts them
inline constexpr double kMaxEpochs = 1e6;                 ///< epochs
inline constexpr double kMaxSeconds = 7 * 24 * 3600.0;    ///< a timeout or interval: one week
inline constexpr double kMaxRanks = 1 << 20;              ///< ranks in a world, or along one dimension of it

}  // namespace ddp
