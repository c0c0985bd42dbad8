// Models: shapes, the registry's errors, and that the weights file is what PyTorch itself would
// write for scripts/ddp_models.py's twin modules (same keys, shapes, order and forward).

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "ddp/common/error.h"
#include "ddp/config/config_schema.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/python_state_dict.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

namespace {

using ddp::ModelConfig;

const std::string kPython = "/usr/bin/python3";
const std::string kScript = std::string(DDP_SOURCE_DIR) + "/scripts/ddp_models.py";

ModelConfig config(const std::string& name, int64_t num_classes = 10, bool batchnorm = true, bool relu = true,
                   std::vector<int64_t> hidden = {256, 128}) {
  ModelConfig config;
  config.name = name;
  config.num_classes = num_classes;
  config.convnet.batchnorm = batchnorm;
  config.convnet.relu = relu;
  config.mlp.hidden = std::move(hidden);
  return config;
}

std::string hidden_list(const std::vector<int64_t>& hidden) {
  std::string out;
  for (int64_t width : hidden) {
    if (!out.empty()) out += ',';
    out += std::to_string(width);
  }
  return out;
}

std::string describe(const ModelConfig& c) {
  return c.name + " num_classes=" + std::to_string(c.num_classes) + " batchnorm=" +
         std::to_string(c.convnet.batchnorm) + " relu=" + std::to_string(c.convnet.relu) +
         " hidden=" + hidden_list(c.mlp.hidden);
}

// The same model, as scripts/ddp_models.py's command-line options.
std::vector<std::string> python_options(const ModelConfig& c) {
  std::vector<std::string> args = {c.name, "--num-classes", std::to_string(c.num_classes), "--hidden",
                                   hidden_list(c.mlp.hidden)};
  if (!c.convnet.batchnorm) args.push_back("--no-batchnorm");
  if (!c.convnet.relu) args.push_back("--no-relu");
  return args;
}

ddp::test::CommandResult python(std::vector<std::string> args) {
  args.insert(args.begin(), kPython);
  auto result = ddp::test::run_command(args, std::chrono::seconds(120));
  INFO("stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  return result;
}

std::string shape(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// Nonzero running statistics, so a forward that ignored the saved buffers would show.
void warm_up(ddp::Model& model) {
  model.train();
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) model.forward(torch::randn({8, 1, 28, 28}) * 2 + 0.5);
  model.eval();
}

}  // namespace

TEST_CASE("every model maps [B,1,28,28] to [B,num_classes]", "[model]") {
  torch::manual_seed(0);
  std::vector<ModelConfig> configs;
  for (int64_t classes : {10, 3})
    for (bool batchnorm : {true, false})
      for (bool relu : {true, false}) configs.push_back(config("convnet", classes, batchnorm, relu));
  configs.push_back(config("linear3"));
  configs.push_back(config("linear3", 5));
  configs.push_back(config("mlp"));
  configs.push_back(config("mlp", 7, true, true, {}));
  configs.push_back(config("mlp", 10, true, true, {32}));
  for (const auto& c : configs) {
    INFO(describe(c));
    auto model = ddp::make_model(c);
    for (int64_t batch : {1, 4}) {
      model->eval();
      auto logits = model->forward(torch::randn({batch, ddp::kInputChannels, ddp::kInputHeight, ddp::kInputWidth}));
      CHECK(logits.sizes() == torch::IntArrayRef({batch, c.num_classes}));
    }
  }
}

TEST_CASE("the registry lists its models and names the fix for a wrong one", "[model]") {
  CHECK(ddp::model_names() == std::vector<std::string>({"convnet", "dlrm", "gpt", "linear3", "llama", "mlp", "torchscript"}));
  CHECK_THROWS_AS(ddp::make_model(config("convnett")), ddp::ConfigError);
  CHECK_THROWS_WITH(ddp::make_model(config("convnett")),
                    "model.name: unknown model \"convnett\" (did you mean convnet?); "
                    "available: convnet, dlrm, gpt, linear3, llama, mlp, torchscript");
  CHECK_THROWS_WITH(ddp::make_model(config("resnet152")),
                    "model.name: unknown model \"resnet152\"; available: convnet, dlrm, gpt, linear3, llama, mlp, torchscript");
  // The registry's bound is the schema's (kMinClasses), so no caller can build a degenerate head.
  CHECK_THROWS_WITH(ddp::make_model(config("linear3", 0)), "model.num_classes: must be >= 2, got 0");
  CHECK_THROWS_WITH(ddp::make_model(config("linear3", 1)), "model.num_classes: must be >= 2, got 1");
  ddp::ModelConfig declared;
  ddp::ConfigSchema schema;
  ddp::declare_config(schema, declared);
  schema.apply_override("model.num_classes=1");
  CHECK(schema.problems() == std::vector<std::string>{"model.num_classes: must be in [2, 1e+07], got 1"});
  CHECK_THROWS_AS(ddp::make_model(config("mlp", 10, true, true, {64, 0})), ddp::ConfigError);
}

TEST_CASE("a model's forward is its blocks in order, declared once, and a model with neither blocks nor a forward of "
          "its own fails instead of passing its input through",
          "[model]") {
  auto mlp = ddp::make_model(config("mlp"));
  const auto& blocks = mlp->blocks();
  REQUIRE(blocks.size() == 3);  // model.hidden's two widths and the classifier
  CHECK(blocks[0].name == "layers.0");
  CHECK(blocks[2].name == "layers.4");
  CHECK(&mlp->blocks() == &blocks);  // the one list every pass and forward read
  torch::NoGradGuard no_grad;
  auto x = torch::rand({2, 1, 28, 28});
  CHECK(torch::equal(mlp->forward(x), ddp::run_in_order(blocks, x)));
  CHECK(ddp::make_model(config("linear3"))->blocks().empty());
  struct Empty : ddp::Model {};
  Empty empty;
  CHECK_THROWS_WITH(empty.forward(x), "a model without declare_blocks() must override forward()");
}

TEST_CASE("state_dict keys and shapes equal the Python twin's", "[model][python]") {
  for (const auto& c : {config("convnet"), config("convnet", 10, false, true), config("convnet", 3, true, false),
                        config("linear3", 4), config("mlp"), config("mlp", 10, true, true, {})}) {
    INFO(describe(c));
    auto model = ddp::make_model(c);
    std::string cpp;
    for (const auto& [name, tensor] : ddp::python_state_dict(*model)) cpp += name + " " + shape(tensor) + "\n";
    std::vector<std::string> args = {kScript, "keys"};
    for (const auto& option : python_options(c)) args.push_back(option);
    CHECK(cpp == python(args).out);
  }
}

TEST_CASE("Python loads model.pt strictly and computes the same logits", "[model][python]") {
  // Loads both files, runs the twin module, prints the key order and the largest difference.
  const std::string check = R"(
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import ddp_models
name, kwargs, model_pt, io_pt = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
model = ddp_models.build(name, **kwargs)
state = torch.load(model_pt, weights_only=True)  # as PyTorch >= 2.6 loads by default
model.load_state_dict(state, strict=True)
model.eval()
io = torch.load(io_pt)
with torch.no_grad():
    out = model(io["input"])
print("keys " + ",".join(state.keys()))
print("maxdiff %.9f" % (out - io["output"]).abs().max().item())
)";
  torch::manual_seed(1);
  ddp::test::TempDir dir;
  for (const auto& c : {config("convnet"), config("convnet", 10, false, false), config("linear3", 6),
                        config("mlp", 10, true, true, {64, 32})}) {
    INFO(describe(c));
    auto model = ddp::make_model(c);
    warm_up(*model);
    // arange keeps the input exact and reproducible; the cosine spreads it over both signs.
    auto input = torch::cos(torch::arange(5 * ddp::kInputSize, torch::kFloat)).reshape({5, 1, 28, 28});
    torch::Tensor output;
    {
      torch::NoGradGuard no_grad;
      output = model->forward(input);
    }
    ddp::save_python_state_dict(*model, dir.file("model.pt"));
    CHECK_FALSE(std::filesystem::exists(dir.file("model.pt.tmp")));
    c10::Dict<std::string, torch::Tensor> io;
    io.insert("input", input);
    io.insert("output", output);
    auto bytes = torch::pickle_save(c10::IValue(io));
    ddp::test::write_file(dir.file("io.pt"), std::string(bytes.begin(), bytes.end()));

    std::string kwargs = "{\"num_classes\": " + std::to_string(c.num_classes) +
                         ", \"batchnorm\": " + (c.convnet.batchnorm ? "true" : "false") +
                         ", \"relu\": " + (c.convnet.relu ? "true" : "false") + ", \"hidden\": [" +
                         hidden_list(c.mlp.hidden) + "]}";
    std::string out = python({"-c", check, std::string(DDP_SOURCE_DIR) + "/scripts", c.name, kwargs,
                              dir.file("model.pt"), dir.file("io.pt")})
                          .out;
    std::string keys;
    for (const auto& [name, tensor] : ddp::python_state_dict(*model)) keys += (keys.empty() ? "" : ",") + name;
    INFO(out);
    CHECK(out.find("keys " + keys + "\n") != std::string::npos);
    std::smatch match;
    REQUIRE(std::regex_search(out, match, std::regex("maxdiff ([0-9.e+-]+)")));
    CHECK(std::stod(match[1]) < 1e-5);
  }
}

TEST_CASE("weights saved from Python load in C++: state_dict()'s OrderedDict, a plain dict, pickle protocol 4",
          "[model][python]") {
  // LibTorch's own unpickler turned the OrderedDict into None and failed an internal assert (issue 22, item 12).
  const std::string save = R"(
import sys, torch
sys.path.insert(0, sys.argv[1])
import ddp_models
model = ddp_models.build("convnet")
model.layer1[1].running_mean.uniform_()  # buffers too, and a value the initialisation does not give
torch.save(model.state_dict(), sys.argv[2])
torch.save(dict(model.state_dict()), sys.argv[3])
torch.save(model.state_dict(), sys.argv[4], pickle_protocol=4)
torch.save({"model": model.state_dict(), "step": 3}, sys.argv[5])
print("%.9f %.9f" % (model.fc.weight.double().sum().item(), model.layer1[1].running_mean.double().sum().item()))
)";
  ddp::test::TempDir dir;
  auto saved = python({"-c", save, std::string(DDP_SOURCE_DIR) + "/scripts", dir.file("ordered.pt"), dir.file("plain.pt"),
                       dir.file("protocol4.pt"), dir.file("checkpoint.pt")});
  INFO(saved.out << saved.err);
  std::istringstream sums(saved.out);
  double fc_sum = 0, mean_sum = 0;
  REQUIRE(sums >> fc_sum >> mean_sum);
  for (const char* file : {"ordered.pt", "plain.pt", "protocol4.pt"}) {
    INFO(file);
    auto model = ddp::make_model(config("convnet"));
    ddp::load_python_state_dict(*model, dir.file(file));
    std::map<std::string, torch::Tensor> loaded;
    for (const auto& [name, tensor] : ddp::python_state_dict(*model)) loaded[name] = tensor;
    CHECK(loaded.at("fc.weight").to(torch::kDouble).sum().item<double>() == Approx(fc_sum).margin(1e-6));
    CHECK(loaded.at("layer1.1.running_mean").to(torch::kDouble).sum().item<double>() == Approx(mean_sum).margin(1e-6));
  }

  // What is not a state dict gets one line naming the file and the cause.
  auto model = ddp::make_model(config("convnet"));
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*model, dir.file("checkpoint.pt")),
                    dir.file("checkpoint.pt") + ": not a state dict: entry 'model' is not a tensor (a checkpoint of "
                                                "several dicts? save the model's own: torch.save(model.state_dict(), path))");
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*model, dir.path()),
                    dir.path() + " is a directory with neither model.safetensors nor model.safetensors.index.json; name the "
                                 "weights file in it (a run's model.pt, say)");
  std::string bytes = ddp::test::read_file(dir.file("ordered.pt"));
  ddp::test::write_file(dir.file("cut.pt"), bytes.substr(0, bytes.size() / 2));
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*model, dir.file("cut.pt")),
                    Catch::StartsWith(dir.file("cut.pt") + ": neither a torch.save file ("));
  ddp::test::write_file(dir.file("text.pt"), "weights\n");
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*model, dir.file("text.pt")),
                    Catch::StartsWith(dir.file("text.pt") + ": neither a torch.save file ("));
}

TEST_CASE("load_python_state_dict restores every parameter and buffer", "[model]") {
  ddp::test::TempDir dir;
  torch::manual_seed(2);
  auto saved = ddp::make_model(config("convnet"));
  warm_up(*saved);
  ddp::save_python_state_dict(*saved, dir.file("model.pt"));

  auto loaded = ddp::make_model(config("convnet"));
  ddp::load_python_state_dict(*loaded, dir.file("model.pt"));
  auto expected = ddp::python_state_dict(*saved);
  auto actual = ddp::python_state_dict(*loaded);
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO(actual[i].first);
    CHECK(actual[i].first == expected[i].first);
    CHECK(torch::equal(actual[i].second, expected[i].second));
  }
  CHECK(actual.back().second.requires_grad());  // still trainable parameters, not replaced tensors
}

TEST_CASE("load_python_state_dict names what does not match and changes nothing", "[model]") {
  ddp::test::TempDir dir;
  const std::string path = dir.file("model.pt");
  ddp::save_python_state_dict(*ddp::make_model(config("convnet")), path);

  auto other = ddp::make_model(config("linear3"));
  auto before = ddp::python_state_dict(*other)[0].second.clone();
  CHECK_THROWS_AS(ddp::load_python_state_dict(*other, path), ddp::FileError);
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*other, path),
                    Catch::StartsWith(path + ": state dict does not match the model: missing keys fc1.weight, "
                                             "fc1.bias, fc2.weight, fc2.bias, fc3.weight, fc3.bias; unexpected keys ") &&
                        Catch::Contains("layer1.0.weight") && Catch::Contains("(+"));
  CHECK(torch::equal(ddp::python_state_dict(*other)[0].second, before));

  auto three = ddp::make_model(config("convnet", 3));
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*three, path),
                    path + ": state dict does not match the model: wrong shapes fc.weight (file [10, 1568], "
                           "model [3, 1568]), fc.bias (file [10], model [3])");

  auto no_batchnorm = ddp::make_model(config("convnet", 10, false));
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*no_batchnorm, path),
                    path + ": state dict does not match the model: unexpected keys layer1.1.weight, "
                           "layer1.1.bias, layer1.1.running_mean, layer1.1.running_var, "
                           "layer1.1.num_batches_tracked, layer2.1.weight, layer2.1.bias, "
                           "layer2.1.running_mean (+2 more)");
}

TEST_CASE("bad weights files are FileErrors naming the file", "[model]") {
  ddp::test::TempDir dir;
  auto model = ddp::make_model(config("linear3"));
  CHECK_THROWS_AS(ddp::load_python_state_dict(*model, dir.file("absent.pt")), ddp::FileError);
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*model, dir.file("absent.pt")),
                    "cannot read model weights " + dir.file("absent.pt") + ": No such file or directory");

  ddp::test::write_file(dir.file("junk.pt"), "not a zip file at all");
  CHECK_THROWS_AS(ddp::load_python_state_dict(*model, dir.file("junk.pt")), ddp::FileError);
  CHECK_THROWS_WITH(ddp::load_python_state_dict(*model, dir.file("junk.pt")),
                    Catch::StartsWith(dir.file("junk.pt") + ": neither a torch.save file (") &&
                        Catch::Contains("not a ZIP archive"));

  const std::string unwritable = dir.file("no/such/dir/model.pt");
  CHECK_THROWS_AS(ddp::save_python_state_dict(*model, unwritable), ddp::IoError);  // an output, not an input
  CHECK_THROWS_WITH(ddp::save_python_state_dict(*model, unwritable),
                    "cannot write " + unwritable + ": open: No such file or directory");
}

TEST_CASE("a torch.save file whose tensor records are malformed is refused in one line, not a crash or an "
          "allocation", "[model][python]") {
  // torch.save's own layout, pickled by hand, with one of _rebuild_tensor_v2's arguments replaced:
  // sizes not a tuple (was SIGSEGV), a storage of 2^40 elements (was "out of memory ... 4 TiB"),
  // strides whose reach wraps past int64 (was LibTorch's error, naming no file).
  const std::string make = R"(
import collections, io, pickle, sys, zipfile, torch
class Ref:
    def __init__(self, count): self.count = count
class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ('storage', torch.FloatStorage, '0', 'cpu', obj.count) if isinstance(obj, Ref) else None
class Tensor:
    def __init__(self, args): self.args = args
    def __reduce__(self): return (torch._utils._rebuild_tensor_v2, self.args)
cases = {'ok': (Ref(6), 0, (2, 3), (3, 1)), 'int_sizes': (Ref(6), 0, 5, (3, 1)), 'dict_sizes': (Ref(6), 0, {}, (3, 1)),
         'float_offset': (Ref(6), 0.5, (2, 3), (3, 1)), 'huge_storage': (Ref(1 << 40), 0, (2, 3), (3, 1)),
         'wrapping_strides': (Ref(6), 0, (3, 2), (6543233869832846966, 1))}
for name, (ref, offset, sizes, strides) in cases.items():
    pickled = io.BytesIO()
    Pickler(pickled, protocol=2).dump(collections.OrderedDict(w=Tensor((ref, offset, sizes, strides, False, collections.OrderedDict()))))
    with zipfile.ZipFile(sys.argv[1] + '/' + name + '.pt', 'w', zipfile.ZIP_STORED) as z:
        z.writestr('archive/data.pkl', pickled.getvalue())
        z.writestr('archive/data/0', torch.arange(6, dtype=torch.float32).numpy().tobytes())
        z.writestr('archive/version', '3\n')
)";
  ddp::test::TempDir dir;
  auto made = python({"-c", make, dir.path()});
  INFO(made.out << made.err);
  REQUIRE(made.exit_code == 0);
  auto ok = ddp::read_state_dict_file(dir.file("ok.pt"));
  REQUIRE(ok.size() == 1);
  CHECK(torch::equal(ok[0].second, torch::arange(6, torch::kFloat).view({2, 3})));
  auto refusal = [&](const std::string& name) {
    try {
      ddp::read_state_dict_file(dir.file(name + ".pt"));
      return std::string("read");
    } catch (const ddp::FileError& e) {
      return std::string(e.what());
    }
  };
  CHECK_THAT(refusal("int_sizes"), Catch::StartsWith(dir.file("int_sizes.pt") + ": ") &&
                                       Catch::Contains("a tensor whose sizes or strides are not a tuple"));
  CHECK_THAT(refusal("dict_sizes"), Catch::Contains("a tensor whose sizes or strides are not a tuple"));
  CHECK_THAT(refusal("float_offset"), Catch::Contains("a tensor whose storage offset is not an integer"));
  CHECK_THAT(refusal("huge_storage"), Catch::StartsWith(dir.file("huge_storage.pt") + ": ") &&
                                          Catch::Contains("storage data/0 holds 24 bytes, not the 1099511627776 × 4"));
  CHECK_THAT(refusal("wrapping_strides"), Catch::Contains("a tensor whose sizes and strides reach past any storage"));
}

TEST_CASE("ddp_models.py eval reports accuracy on the t10k set", "[model][python]") {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data + "/t10k-images-idx3-ubyte.gz")) {
    WARN("skipped: no Fashion-MNIST in " << data);
    return;
  }
  ddp::test::TempDir dir;
  torch::manual_seed(3);
  ddp::save_python_state_dict(*ddp::make_model(config("linear3")), dir.file("model.pt"));
  std::string out = python({kScript, "eval", dir.file("model.pt"), "linear3", "--data", data}).out;
  CHECK(std::regex_match(out, std::regex("accuracy 0\\.[0-9]{4}\n")));
}

}  // namespace DDP_TEST_FILE
