#include "ddp/model/state_dict_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <unordered_map>

#include "ddp/common/error.h"
#include "ddp/model/hugging_face.h"
#include "ddp/model/safetensors.h"
#include "ddp/model/zip_checksums.h"

namespace ddp {
namespace {

// A value on the pickle machine's stack. Containers are shared, as Python's objects are, so a
// memoised dict that SETITEMS fills later is filled for every holder.
struct Item {
  enum class Kind { kMark, kNone, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor };
  Kind kind = Kind::kNone;
  int64_t integer = 0;                                   // kInt (and bools); kStorage: its element count
  double real = 0;                                       // kFloat
  std::string text;                                      // kString; kGlobal as "module.name"; kStorage: its record
  torch::Dtype dtype = torch::kFloat;                    // kStorage
  std::shared_ptr<std::vector<Item>> items;              // kTuple, kList
  std::shared_ptr<std::vector<std::pair<Item, Item>>> entries;  // kDict, in insertion order
  StoredTensor stored;                                   // kTensor: a view of a storage, read when asked
};

Item make(Item::Kind kind) {
  Item item;
  item.kind = kind;
  if (kind == Item::Kind::kTuple || kind == Item::Kind::kList) item.items = std::make_shared<std::vector<Item>>();
  if (kind == Item::Kind::kDict) item.entries = std::make_shared<std::vector<std::pair<Item, Item>>>();
  return item;
}

// Storage classes as torch.save names them (the legacy typed names, in PyTorch 1.x and 2.x alike).
torch::Dtype storage_dtype(const std::string& name, const std::string& path) {
  static const std::map<std::string, torch::Dtype> kTypes = {
      {"torch.DoubleStorage", torch::kDouble}, {"torch.FloatStorage", torch::kFloat},
      {"torch.HalfStorage", torch::kHalf},     {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kLong},     {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},   {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},     {"torch.BoolStorage", torch::kBool},
      {"torch.UntypedStorage", torch::kByte}};
  auto found = kTypes.find(name);
  if (found == kTypes.end()) throw FileError(path + ": holds a storage of type " + name + ", which ddprun does not read");
  return found->second;
}

// The opcodes torch.save's pickles use (protocol 2, the default, and 3 to 5), run over data.pkl.
class PickleMachine {
 public:
  PickleMachine(const char* data, std::size_t size, std::shared_ptr<caffe2::serialize::PyTorchStreamReader> zip,
                std::shared_ptr<const ZipChecksums> checksums, std::string path)
      : data_(data), size_(size), zip_(std::move(zip)), checksums_(std::move(checksums)), path_(std::move(path)) {}

  Item run() {
    for (;;) {
      auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME
        case '.': return pop();     // STOP
        case '(': stack_.push_back(make(Item::Kind::kMark)); break;
        case '0': pop(); break;
        case '1': to_mark(); break;
        case '2': stack_.push_back(top()); break;
        case 'N': stack_.push_back(make(Item::Kind::kNone)); break;
        case 0x88: case 0x89: push_int(op == 0x88); break;  // NEWTRUE, NEWFALSE
        case 'J': push_int(static_cast<int32_t>(little(4))); break;
        case 'K': push_int(static_cast<int64_t>(little(1))); break;
        case 'M': push_int(static_cast<int64_t>(little(2))); break;
        case 0x8a: push_long(static_cast<std::size_t>(little(1))); break;  // LONG1
        case 'G': push_float(); break;
        case 'X': case 'T': case 'B': push_string(little(4)); break;
        case 0x8c: case 'U': case 'C': push_string(little(1)); break;
        case 0x8d: case 0x8e: push_string(little(8)); break;
        case ')': stack_.push_back(make(Item::Kind::kTuple)); break;
        case 't': stack_.push_back(collect(Item::Kind::kTuple, to_mark())); break;
        case 0x85: case 0x86: case 0x87: tuple_of(op - 0x84); break;
        case ']': stack_.push_back(make(Item::Kind::kList)); break;
        case 'l': stack_.push_back(collect(Item::Kind::kList, to_mark())); break;
        case 'a': { Item value = pop(); expect(top(), Item::Kind::kList).items->push_back(value); break; }
        case 'e': { auto values = to_mark(); auto& list = *expect(top(), Item::Kind::kList).items;
                    list.insert(list.end(), values.begin(), values.end()); break; }
        case '}': stack_.push_back(make(Item::Kind::kDict)); break;
        case 'd': { Item dict = make(Item::Kind::kDict); set_items(dict, to_mark()); stack_.push_back(dict); break; }
        case 's': { Item value = pop(), key = pop(); set_items(top(), {key, value}); break; }
        case 'u': { auto pairs = to_mark(); set_items(top(), pairs); break; }
        case 'c': { std::string module = line(); push_global(module + "." + line()); break; }
        case 0x93: { Item name = pop(), module = pop(); push_global(module.text + "." + name.text); break; }
        case 'q': memo_[static_cast<int64_t>(little(1))] = top(); break;
        case 'r': memo_[static_cast<int64_t>(little(4))] = top(); break;
        case 0x94: memo_[static_cast<int64_t>(memo_.size())] = top(); break;  // MEMOIZE
        case 'h': stack_.push_back(recall(little(1))); break;
        case 'j': stack_.push_back(recall(little(4))); break;
        case 'Q': stack_.push_back(storage(pop())); break;  // BINPERSID
        case 'R': case 0x81: { Item args = pop(), callable = pop(); stack_.push_back(call(callable, args)); break; }
        case 'b': build(); break;
        default: fail("pickle opcode 0x" + hex(op) + ", which torch.save does not write for a state dict");
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw FileError(path_ + ": not a torch.save state dict (" + why + ")");
  }
  static std::string hex(unsigned value) {
    char text[8];
    std::snprintf(text, sizeof text, "%02x", value);
    return text;
  }

  const char* take(std::size_t n) {
    if (n > size_ - at_) fail("data.pkl is cut short");
    const char* bytes = data_ + at_;
    at_ += n;
    return bytes;
  }
  uint64_t little(std::size_t n) {
    const char* bytes = take(n);
    uint64_t value = 0;
    for (std::size_t i = 0; i < n; ++i) value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    return value;
  }
  std::string line() {
    std::size_t end = at_;
    while (end < size_ && data_[end] != '\n') ++end;
    if (end == size_) fail("data.pkl is cut short");
    std::string text(data_ + at_, end - at_);
    at_ = end + 1;
    return text;
  }

  Item pop() {
    if (stack_.empty() || stack_.back().kind == Item::Kind::kMark) fail("its pickle pops an empty stack");
    Item item = std::move(stack_.back());
    stack_.pop_back();
    return item;
  }
  Item& top() {
    if (stack_.empty()) fail("its pickle reads an empty stack");
    return stack_.back();
  }
  std::vector<Item> to_mark() {
    std::vector<Item> items;
    while (!stack_.empty() && stack_.back().kind != Item::Kind::kMark) items.insert(items.begin(), pop());
    if (stack_.empty()) fail("its pickle has no mark where one is needed");
    stack_.pop_back();
    return items;
  }
  Item& expect(Item& item, Item::Kind kind) {
    if (item.kind != kind) fail("its pickle adds entries to something that is not a container");
    return item;
  }
  Item recall(uint64_t key) {
    auto found = memo_.find(static_cast<int64_t>(key));
    if (found == memo_.end()) fail("its pickle recalls a value it never stored");
    return found->second;
  }

  void push_int(int64_t value) {
    Item item = make(Item::Kind::kInt);
    item.integer = value;
    stack_.push_back(item);
  }
  void push_long(std::size_t n) {
    if (n > 8) fail("an integer wider than 64 bits");
    uint64_t value = little(n);
    if (n > 0 && n < 8 && (value >> (8 * n - 1)) & 1) value |= ~uint64_t{0} << (8 * n);  // sign-extend
    push_int(static_cast<int64_t>(value));
  }
  void push_float() {
    const char* bytes = take(8);
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(bytes[i]);  // big-endian
    Item item = make(Item::Kind::kFloat);
    std::memcpy(&item.real, &bits, sizeof bits);
    stack_.push_back(item);
  }
  void push_string(uint64_t n) {
    if (n > size_) fail("data.pkl is cut short");
    const char* bytes = take(static_cast<std::size_t>(n));
    Item item = make(Item::Kind::kString);
    item.text.assign(bytes, static_cast<std::size_t>(n));
    stack_.push_back(item);
  }
  void push_global(const std::string& name) {
    Item item = make(Item::Kind::kGlobal);
    item.text = name;
    stack_.push_back(item);
  }
  Item collect(Item::Kind kind, std::vector<Item> values) {
    Item item = make(kind);
    *item.items = std::move(values);
    return item;
  }
  void tuple_of(int n) {
    std::vector<Item> values;
    for (int i = 0; i < n; ++i) values.insert(values.begin(), pop());
    stack_.push_back(collect(Item::Kind::kTuple, std::move(values)));
  }
  void set_items(Item& dict, const std::vector<Item>& pairs) {
    expect(dict, Item::Kind::kDict);
    if (pairs.size() % 2) fail("its pickle sets a key without a value");
    for (std::size_t i = 0; i < pairs.size(); i += 2) dict.entries->emplace_back(pairs[i], pairs[i + 1]);
  }

  // A persistent id: ('storage', storage class, record key, location, element count).
  Item storage(const Item& id) {
    if (id.kind != Item::Kind::kTuple || id.items->size() < 5 || (*id.items)[0].text != "storage")
      fail("a persistent id that is not a storage");
    const auto& fields = *id.items;
    Item item = make(Item::Kind::kStorage);
    if (fields[4].kind != Item::Kind::kInt) fail("a storage whose size is not an integer");
    item.dtype = storage_dtype(fields[1].text, path_);
    item.integer = fields[4].integer;
    item.text = "data/" + fields[2].text;
    if (!zip_->hasRecord(item.text)) fail("its storage " + item.text + " is missing");
    if (item.integer < 0) fail("storage " + item.text + " has a negative size");
    return item;
  }

  // A tensor over `storage`: its extent checked now, its bytes read when asked.
  Item tensor_over(const Item& storage, int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
    if (sizes.size() != strides.size() || offset < 0) fail("a tensor whose sizes and strides do not agree");
    int64_t last = offset;  // the last element it reads, for a tensor of any elements
    bool empty = false;
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] < 0 || strides[d] < 0) fail("a tensor with a negative size or stride");
      empty = empty || sizes[d] == 0;
      int64_t reach = 0;
      if (!empty &&
          (__builtin_mul_overflow(sizes[d] - 1, strides[d], &reach) || __builtin_add_overflow(last, reach, &last)))
        fail("a tensor whose sizes and strides reach past any storage");
    }
    if (!empty && last >= storage.integer)
      fail("a tensor reaches element " + std::to_string(last) + " of storage " + storage.text + ", which holds " +
           std::to_string(storage.integer));
    Item item = make(Item::Kind::kTensor);
    item.stored.shape = sizes;
    item.stored.dtype = storage.dtype;
    item.stored.read = [zip = zip_, checksums = checksums_, path = path_, record = storage.text,
                        count = storage.integer, dtype = storage.dtype, offset, sizes, strides,
                        read = read_]() -> torch::Tensor {
      // Tensors over one storage (tied, or views of a flat buffer) read it once while any holds it.
      if (auto held = read->storages.find(record); held != read->storages.end())
        if (auto storage = held->second.lock()) {
          torch::Tensor values = torch::empty({0}, torch::TensorOptions().dtype(dtype));
          values.set_(c10::Storage(std::move(storage)), 0, {count}, {1});
          return values.as_strided(sizes, strides, offset);
        }
      std::tuple<at::DataPtr, size_t> got;
      try {
        got = zip->getRecord(record);
      } catch (const c10::Error& e) {
        std::string reason = e.what();
        throw FileError(path + ": cannot read storage " + record + ": " + reason.substr(0, reason.find('\n')));
      }
      const auto& [bytes, size] = got;
      // Checked before the tensor is made: a count no file holds would be reported as out of memory.
      std::size_t expected = 0;
      const std::size_t element = c10::elementSize(dtype);
      if (__builtin_mul_overflow(static_cast<std::size_t>(count), element, &expected) || size != expected)
        throw FileError(path + ": not a torch.save state dict (storage " + record + " holds " + std::to_string(size) +
                        " bytes, not the " + std::to_string(count) + " × " + std::to_string(element) +
                        " its tensor needs)");
      torch::Tensor values = torch::empty({count}, torch::TensorOptions().dtype(dtype));
      checksums->check(record, bytes.get(), size);  // Note [torch.save's checksums]
      std::memcpy(values.data_ptr(), bytes.get(), size);
      read->storages.insert_or_assign(record, values.storage().getWeakStorageImpl());
      return values.as_strided(sizes, strides, offset);
    };
    return item;
  }

  std::vector<int64_t> ints(const Item& tuple) {
    if (tuple.kind != Item::Kind::kTuple) fail("a tensor whose sizes or strides are not a tuple");
    std::vector<int64_t> values;
    for (const Item& item : *tuple.items) {
      if (item.kind != Item::Kind::kInt) fail("a tensor whose sizes or strides are not integers");
      values.push_back(item.integer);
    }
    return values;
  }

  Item call(const Item& callable, const Item& args) {
    if (callable.kind != Item::Kind::kGlobal || args.kind != Item::Kind::kTuple) fail("a call that is not a class's");
    const auto& a = *args.items;
    const std::string& name = callable.text;
    if (name == "collections.OrderedDict" || name == "builtins.dict") return make(Item::Kind::kDict);
    if (name == "torch._utils._rebuild_tensor_v2" && a.size() >= 4 && a[0].kind == Item::Kind::kStorage) {
      if (a[1].kind != Item::Kind::kInt) fail("a tensor whose storage offset is not an integer");
      return tensor_over(a[0], a[1].integer, ints(a[2]), ints(a[3]));
    }
    if ((name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") &&
        !a.empty() && a[0].kind == Item::Kind::kTensor)
      return a[0];
    fail("it holds a " + name + " object; ddprun reads dicts of tensors");
  }

  // BUILD sets an object's state: an OrderedDict's `_metadata` (module versions), not needed here.
  void build() {
    pop();
    Item& object = top();
    if (object.kind != Item::Kind::kDict && object.kind != Item::Kind::kTensor) fail("it sets the state of an object");
  }

  const char* data_;
  std::size_t size_;
  std::size_t at_ = 0;
  std::shared_ptr<caffe2::serialize::PyTorchStreamReader> zip_;
  std::shared_ptr<const ZipChecksums> checksums_;
  // The storages read and still held by a tensor, by record: one file's, shared by its tensors' reads.
  struct Read {
    std::map<std::string, c10::weak_intrusive_ptr<c10::StorageImpl>> storages;
  };
  std::shared_ptr<Read> read_ = std::make_shared<Read>();
  std::string path_;
  std::vector<Item> stack_;
  std::unordered_map<int64_t, Item> memo_;
};

// One tensor of a safetensors file, read through `file`, which its reads keep open.
void add_stored(const std::shared_ptr<SafetensorsFile>& file, const SafetensorsEntry& entry, StoredTensors& out) {
  out.emplace_back(entry.name, StoredTensor{entry.shape, entry.type, [file, &entry] { return file->read(entry); },
                                            [file, &entry](c10::IntArrayRef view, const TensorPart& part) {
                                              return file->read_part(entry, view, part);
                                            }});
}

// A Hugging Face directory's weights (Note [Hugging Face directories]): every shard's tensors, each
// where the index says it is, and no name twice.
StoredTensors open_hugging_face_weights(const std::string& dir) {
  WeightFiles weights = hugging_face_weight_files(dir);
  std::map<std::string, std::string> listed(weights.names.begin(), weights.names.end());
  std::map<std::string, std::string> found;  // name → the file it was read from
  StoredTensors entries;
  for (const auto& path : weights.files) {
    auto file = std::make_shared<SafetensorsFile>(path);
    for (const auto& entry : file->entries()) {
      if (auto twice = found.find(entry.name); twice != found.end())
        throw FileError(path + ": tensor '" + entry.name + "' is also in " + twice->second);
      if (!listed.empty() && listed.count(entry.name) && listed.at(entry.name) != path)
        throw FileError(path + ": tensor '" + entry.name + "' is here, but the index puts it in " + listed.at(entry.name));
      if (!listed.empty() && !listed.count(entry.name))
        throw FileError(path + ": tensor '" + entry.name + "' is not in the index's weight_map");
      found.emplace(entry.name, path);
      add_stored(file, entry, entries);
    }
  }
  for (const auto& [name, path] : weights.names)
    if (!found.count(name)) throw FileError(path + ": holds no tensor '" + name + "', which the index puts there");
  return entries;
}

}  // namespace

StoredTensors open_state_dict_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error))
    throw FileError("cannot read model weights " + path + ": No such file or directory");
  if (std::filesystem::is_directory(path, error)) return open_hugging_face_weights(path);
  if (looks_like_safetensors(path)) {
    auto file = std::make_shared<SafetensorsFile>(path);
    StoredTensors entries;
    for (const auto& entry : file->entries()) add_stored(file, entry, entries);
    return entries;
  }
  std::shared_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  try {
    zip = std::make_shared<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception& e) {
    std::string reason = e.what();
    throw FileError(path + ": neither a torch.save file (" + reason.substr(0, reason.find('\n')) +
                    ") nor a safetensors file; write it with torch.save(model.state_dict(), path) or "
                    "safetensors.torch.save_file");
  }
  if (!zip->hasRecord("data.pkl")) throw FileError(path + ": not a torch.save file (no data.pkl in it)");
  auto checksums = std::make_shared<const ZipChecksums>(path);
  auto [pickle, size] = zip->getRecord("data.pkl");
  checksums->check("data.pkl", pickle.get(), size);
  Item top = PickleMachine(static_cast<const char*>(pickle.get()), size, zip, checksums, path).run();
  if (top.kind != Item::Kind::kDict) throw FileError(path + ": not a state dict (it holds no dict)");
  StoredTensors entries;
  for (const auto& [key, value] : *top.entries) {
    if (key.kind != Item::Kind::kString) throw FileError(path + ": not a state dict (a key is not a name)");
    if (value.kind != Item::Kind::kTensor)
      throw FileError(path + ": not a state dict: entry '" + key.text +
                      "' is not a tensor (a checkpoint of several dicts? save the model's own: "
                      "torch.save(model.state_dict(), path))");
    entries.emplace_back(key.text, value.stored);
  }
  return entries;
}

std::vector<std::pair<std::string, torch::Tensor>> read_state_dict_file(const std::string& path) {
  std::vector<std::pair<std::string, torch::Tensor>> entries;
  for (auto& [name, stored] : open_state_dict_file(path)) entries.emplace_back(name, stored.read());
  return entries;
}

}  // namespace ddp
