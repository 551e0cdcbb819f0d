// PyTorch checkpoints (fovea/torch_checkpoint.hpp): the ZIP directory, a pickle interpreter
// that never calls anything, and the tensors found in the unpickled object.
#include "fovea/torch_checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "fovea/error.hpp"
#include "io/file_bytes.hpp"

namespace fovea {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why, Errc code = Errc::corrupt_data) {
  throw Error(code, "'" + path + "': " + why);
}

// torch.save's legacy format starts with a pickle (protocol 2) of a 10-byte LONG1: its magic number.
bool legacy_head(const uint8_t* d, uint64_t n) { return n >= 4 && d[0] == 0x80 && d[1] == 0x02 && d[2] == 0x8a && d[3] == 0x0a; }

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---------------------------------------------------------------------------------------------
// ZIP: the central directory (ZIP64 included) of an archive of stored entries.

struct ZipEntry {
  uint64_t offset = 0;  // of the data, from the start of the archive
  uint64_t size = 0;
  bool stored = true;
  bool encrypted = false;
};

std::map<std::string, ZipEntry> read_zip(const uint8_t* d, uint64_t n, const std::string& path) {
  auto bad = [&](const std::string& why) { fail(path, "not a readable ZIP archive: " + why); };
  // The end-of-central-directory record: 22 bytes plus a comment of up to 65535.
  if (n < 22) bad("too short");
  int64_t eocd = -1;
  for (int64_t at = int64_t(n) - 22; at >= 0 && at >= int64_t(n) - 22 - 65535; --at)
    if (le(d + at, 4) == 0x06054b50 && uint64_t(at) + 22 + le(d + at + 20, 2) <= n) {
      eocd = at;
      break;
    }
  if (eocd < 0) bad("no end-of-central-directory record");
  const uint8_t* e = d + eocd;
  uint64_t count = le(e + 10, 2), cd_size = le(e + 12, 4), cd_offset = le(e + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // ZIP64: a locator just before the record points at the ZIP64 end record.
    if (eocd < 20 || le(d + eocd - 20, 4) != 0x07064b50) bad("ZIP64 sizes without a ZIP64 locator");
    const uint64_t z = le(d + eocd - 20 + 8, 8);
    if (z > n || n - z < 56 || le(d + z, 4) != 0x06064b50) bad("ZIP64 end record out of bounds");
    count = le(d + z + 32, 8), cd_size = le(d + z + 40, 8), cd_offset = le(d + z + 48, 8);
  }
  if (cd_offset > n || cd_size > n - cd_offset) bad("central directory out of bounds");
  if (count > cd_size / 46) bad("central directory too small for " + std::to_string(count) + " entries");
  std::map<std::string, ZipEntry> out;
  uint64_t at = cd_offset;
  const uint64_t end = cd_offset + cd_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (end - at < 46 || le(d + at, 4) != 0x02014b50) bad("central directory entry " + std::to_string(i) + " is damaged");
    const uint8_t* c = d + at;
    const uint64_t flags = le(c + 8, 2), method = le(c + 10, 2);
    uint64_t csize = le(c + 20, 4), usize = le(c + 24, 4), local = le(c + 42, 4);
    const uint64_t name_len = le(c + 28, 2), extra_len = le(c + 30, 2), comment_len = le(c + 32, 2);
    if (end - at - 46 < name_len + extra_len + comment_len) bad("central directory entry " + std::to_string(i) + " overruns it");
    std::string name(reinterpret_cast<const char*>(c + 46), name_len);
    // ZIP64 extended information: the 8-byte values of the fields saturated above, in order.
    const uint8_t* x = c + 46 + name_len;
    for (uint64_t xo = 0; xo + 4 <= extra_len;) {
      const uint64_t id = le(x + xo, 2), len = le(x + xo + 2, 2);
      if (xo + 4 + len > extra_len) break;
      if (id == 1) {
        uint64_t fo = xo + 4;
        auto take = [&](uint64_t& v) {
          if (v != 0xffffffff) return;
          if (fo + 8 > xo + 4 + len) bad("ZIP64 field of '" + name + "' is short");
          v = le(x + fo, 8), fo += 8;
        };
        take(usize), take(csize), take(local);
      }
      xo += 4 + len;
    }
    if (local > n || n - local < 30 || le(d + local, 4) != 0x04034b50) bad("local header of '" + name + "' out of bounds");
    const uint64_t data = local + 30 + le(d + local + 26, 2) + le(d + local + 28, 2);
    ZipEntry z;
    z.offset = data;
    z.size = usize;
    z.stored = method == 0;
    z.encrypted = flags & 1;
    if (z.stored && csize != usize) bad("stored entry '" + name + "' has two sizes");
    if (data > n || csize > n - data) bad("entry '" + name + "' runs past the end of the file (truncated?)");
    out.emplace(std::move(name), z);  // a repeated name keeps its first entry
    at += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The pickle: values in an arena (indices, so no reference cycle can leak), a stack and marks.

struct StorageType {
  const char* torch_name;
  const char* dtype_name;
  bool known;
  DType dtype;
  size_t size;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", "F32", true, DType::f32, 4},     {"DoubleStorage", "F64", true, DType::f64, 8},
    {"HalfStorage", "F16", true, DType::f16, 2},      {"BFloat16Storage", "BF16", true, DType::bf16, 2},
    {"LongStorage", "I64", true, DType::i64, 8},      {"IntStorage", "I32", true, DType::i32, 4},
    {"ShortStorage", "I16", true, DType::i16, 2},     {"CharStorage", "I8", true, DType::i8, 1},
    {"ByteStorage", "U8", true, DType::u8, 1},        {"BoolStorage", "BOOL", false, DType::u8, 1},
    {"ComplexFloatStorage", "C64", false, DType::u8, 8}, {"ComplexDoubleStorage", "C128", false, DType::u8, 16},
};

struct Val {
  enum Kind : uint8_t { none, boolean, integer, floating, str, bytes, tuple, list, dict, set, global, storage, tensor, object };
  Kind kind = none;
  int64_t i = 0;       // integer, boolean; storage: numel; tensor: index into the tensor table
  double f = 0;
  std::string s;       // str, bytes; global "module.name"; object: its class; storage: key
  std::vector<int32_t> items;  // tuple, list, set; dict and object: key, value, key, value...
  int32_t state = -1;  // object: what BUILD set
  int32_t type = -1;   // storage: index into kStorageTypes
};

struct TensorRec {
  int32_t storage = -1;
  int64_t offset = 0;
  std::vector<int64_t> shape, stride;
};

class Unpickler {
 public:
  Unpickler(const uint8_t* p, uint64_t n, const std::string& path) : p_(p), n_(n), path_(path) {}

  // Runs the opcodes up to STOP; returns the index of the unpickled object. One line per opcode:
  // those that take more than a push have a method of their name below.
  int32_t run() {
    for (;;) {
      const uint8_t op = u8();
      switch (op) {
        case 0x80: u8(); break;              // PROTO
        case 0x95: skip(8); break;           // FRAME
        case '.':                            // STOP
          if (stack_.empty()) bad("STOP with an empty stack");
          return stack_.back();
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case '0': pop(); break;                            // POP
        case '1': pop_mark(); break;                       // POP_MARK
        case '2': push(top()); break;                      // DUP
        case 'N': push(make(Val::none)); break;
        case 0x88: push(integer(1, Val::boolean)); break;  // NEWTRUE
        case 0x89: push(integer(0, Val::boolean)); break;  // NEWFALSE
        case 'J': push(integer(int32_t(uint32_t(le(take(4), 4))))); break;  // BININT
        case 'K': push(integer(u8())); break;                               // BININT1
        case 'M': push(integer(int64_t(le(take(2), 2)))); break;            // BININT2
        case 0x8a: push(long_n(u8())); break;                               // LONG1
        case 0x8b: long4(); break;                                          // LONG4
        case 'G': binfloat(); break;                                        // BINFLOAT
        case 'X': push(text(le(take(4), 4), Val::str)); break;      // BINUNICODE
        case 0x8c: push(text(u8(), Val::str)); break;               // SHORT_BINUNICODE
        case 0x8d: push(text(le(take(8), 8), Val::str)); break;     // BINUNICODE8
        case 'T': push(text(le(take(4), 4), Val::str)); break;      // BINSTRING
        case 'U': push(text(u8(), Val::str)); break;                // SHORT_BINSTRING
        case 'B': push(text(le(take(4), 4), Val::bytes)); break;    // BINBYTES
        case 'C': push(text(u8(), Val::bytes)); break;              // SHORT_BINBYTES
        case 0x8e: case 0x96: push(text(le(take(8), 8), Val::bytes)); break;  // BINBYTES8, BYTEARRAY8
        case '}': push(make(Val::dict)); break;   // EMPTY_DICT
        case ']': push(make(Val::list)); break;   // EMPTY_LIST
        case ')': push(make(Val::tuple)); break;  // EMPTY_TUPLE
        case 0x8f: push(make(Val::set)); break;   // EMPTY_SET
        case 'd': case 'l': case 't': case 0x91: collection(op); break;  // DICT, LIST, TUPLE, FROZENSET
        case 0x85: case 0x86: case 0x87: small_tuple(op); break;          // TUPLE1..3
        case 'a': append(); break;                                        // APPEND
        case 'e': case 0x90: appends(); break;                            // APPENDS, ADDITEMS
        case 's': setitem(); break;                                       // SETITEM
        case 'u': setitems(); break;                                      // SETITEMS
        case 'c': global_op(); break;                                     // GLOBAL "module\nname\n"
        case 0x93: stack_global(); break;                                 // STACK_GLOBAL
        case 'Q': push(persistent(pop())); break;                         // BINPERSID
        case 'R': reduce_op(); break;                                     // REDUCE
        case 0x81: newobj(); break;                                       // NEWOBJ
        case 0x92: newobj_ex(); break;                                    // NEWOBJ_EX
        case 'b': build(); break;                                         // BUILD
        case 'q': memo_[uint32_t(u8())] = top(); break;              // BINPUT
        case 'r': memo_[uint32_t(le(take(4), 4))] = top(); break;    // LONG_BINPUT
        case 0x94: memo_[uint32_t(memo_.size())] = top(); break;     // MEMOIZE
        case 'h': push(get(u8())); break;                            // BINGET
        case 'j': push(get(uint32_t(le(take(4), 4)))); break;        // LONG_BINGET
        default: unknown_opcode(op);
      }
    }
  }

  const std::vector<Val>& vals() const { return vals_; }
  const std::vector<TensorRec>& tensors() const { return tensors_; }
  uint64_t consumed() const { return at_; }  // bytes read, up to and with STOP

 private:
  static constexpr size_t kMaxValues = 4u << 20;
  static constexpr size_t kMaxString = 64u << 20;
  static constexpr size_t kMaxCopied = 16u << 20;

  [[noreturn]] void bad(const std::string& why) const { fail(path_, "data.pkl: " + why); }
  const uint8_t* take(uint64_t k) {
    if (k > n_ - at_) bad("ends inside an opcode (truncated)");
    const uint8_t* p = p_ + at_;
    at_ += k;
    return p;
  }
  uint8_t u8() { return *take(1); }
  void skip(uint64_t k) { take(k); }
  std::string line() {
    const uint8_t* s = p_ + at_;
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(s, '\n', size_t(std::min<uint64_t>(n_ - at_, 1024))));
    if (!nl) bad("GLOBAL without a newline");
    at_ += uint64_t(nl - s) + 1;
    return std::string(reinterpret_cast<const char*>(s), size_t(nl - s));
  }
  int32_t make(Val::Kind k) {
    if (vals_.size() >= kMaxValues) fail(path_, "data.pkl holds more than " + std::to_string(kMaxValues) + " values", Errc::limit_exceeded);
    vals_.emplace_back().kind = k;
    return int32_t(vals_.size() - 1);
  }
  int32_t integer(int64_t v, Val::Kind k = Val::integer) {
    const int32_t x = make(k);
    vals_[size_t(x)].i = v;
    return x;
  }
  int32_t long_n(int len) {
    if (len > 8) bad("an integer of " + std::to_string(len) + " bytes");
    const uint8_t* b = take(uint64_t(len));
    uint64_t v = len ? le(b, len) : 0;
    if (len && len < 8 && (b[len - 1] & 0x80)) v |= ~uint64_t(0) << (8 * len);  // sign-extend
    return integer(int64_t(v));
  }
  int32_t text(uint64_t len, Val::Kind k) {
    if (len > kMaxString) fail(path_, "data.pkl: a string of " + std::to_string(len) + " bytes", Errc::limit_exceeded);
    const uint8_t* b = take(len);
    const int32_t v = make(k);
    vals_[size_t(v)].s.assign(reinterpret_cast<const char*>(b), size_t(len));
    return v;
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(int32_t v) { stack_.push_back(v); }
  int32_t top() const {
    if (stack_.size() <= floor()) bad("an opcode needs a value the stack does not have");
    return stack_.back();
  }
  int32_t pop() {
    const int32_t v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<int32_t> pop_mark() {
    if (marks_.empty()) bad("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<int32_t> items(stack_.begin() + long(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  int32_t get(uint32_t key) const {
    const auto it = memo_.find(key);
    if (it == memo_.end()) bad("memo " + std::to_string(key) + " read before it was written");
    return it->second;
  }
  // Container items made by copying (not moved off the stack) count against a budget: a pickle
  // of n bytes could otherwise copy a long list n times.
  void grow(size_t k) {
    copied_ += k;
    if (copied_ > kMaxCopied)
      fail(path_, "data.pkl builds more than " + std::to_string(kMaxCopied) + " container items", Errc::limit_exceeded);
  }
  void add_items(int32_t target, const std::vector<int32_t>& items) {
    Val& t = vals_[size_t(target)];
    if (t.kind != Val::list && t.kind != Val::set && t.kind != Val::object) bad("APPEND to something not a list");
    if (t.kind == Val::object) return;  // a list subclass: its items never hold a state dict
    t.items.insert(t.items.end(), items.begin(), items.end());
  }
  void set_items(int32_t target, const std::vector<int32_t>& kv) {
    Val& t = vals_[size_t(target)];
    if (t.kind != Val::dict && t.kind != Val::object) bad("SETITEM on something not a dict");
    t.items.insert(t.items.end(), kv.begin(), kv.end());  // an object: a dict subclass (its items)
  }
  int32_t global(std::string name) {
    const int32_t v = make(Val::global);
    vals_[size_t(v)].s = std::move(name);
    return v;
  }
  int32_t object(int32_t cls, int32_t args) {
    const int32_t v = make(Val::object);
    vals_[size_t(v)].s = vals_[size_t(cls)].kind == Val::global ? vals_[size_t(cls)].s : std::string("?");
    vals_[size_t(v)].items.clear();
    (void)args;
    return v;
  }
  // ---- the opcodes that take more than a push (see run()) ----
  void long4() {
    const uint64_t len = le(take(4), 4);
    if (len > 8) bad("an integer of " + std::to_string(len) + " bytes");
    push(long_n(int(len)));
  }
  void binfloat() {  // big-endian
    const uint8_t* b = take(8);
    uint64_t bits = 0;
    for (int k = 0; k < 8; ++k) bits = (bits << 8) | b[k];
    const int32_t v = make(Val::floating);
    std::memcpy(&vals_[size_t(v)].f, &bits, 8);
    push(v);
  }
  void collection(uint8_t op) {
    std::vector<int32_t> items = pop_mark();
    const Val::Kind k = op == 'd' ? Val::dict : op == 'l' ? Val::list : op == 't' ? Val::tuple : Val::set;
    if (k == Val::dict && items.size() % 2) bad("DICT with an odd number of items");
    const int32_t v = make(k);
    vals_[size_t(v)].items = std::move(items);
    push(v);
  }
  void small_tuple(uint8_t op) {
    const size_t k = size_t(op - 0x84);
    if (stack_.size() < k + floor()) bad("TUPLE" + std::to_string(k) + " on a short stack");
    const int32_t v = make(Val::tuple);
    vals_[size_t(v)].items.assign(stack_.end() - long(k), stack_.end());
    stack_.resize(stack_.size() - k);
    push(v);
  }
  void append() {
    const int32_t x = pop();
    add_items(top(), {x});
  }
  void appends() {
    std::vector<int32_t> items = pop_mark();
    add_items(top(), items);
  }
  void setitem() {
    const int32_t v = pop(), k = pop();
    set_items(top(), {k, v});
  }
  void setitems() {
    std::vector<int32_t> items = pop_mark();
    if (items.size() % 2) bad("SETITEMS with an odd number of items");
    set_items(top(), items);
  }
  void global_op() {
    const std::string module = line(), name = line();
    push(global(module + "." + name));
  }
  void stack_global() {
    const int32_t name = pop(), module = pop();
    if (vals_[size_t(name)].kind != Val::str || vals_[size_t(module)].kind != Val::str) bad("STACK_GLOBAL of non-strings");
    push(global(vals_[size_t(module)].s + "." + vals_[size_t(name)].s));
  }
  void reduce_op() {
    const int32_t args = pop(), callable = pop();
    push(reduce(callable, args, 0));
  }
  void newobj() {
    const int32_t args = pop(), cls = pop();
    push(object(cls, args));
  }
  void newobj_ex() {
    pop();
    newobj();
  }
  void build() {
    const int32_t state = pop();
    Val& o = vals_[size_t(top())];
    if (o.kind == Val::object && o.state < 0) o.state = state;
  }
  [[noreturn]] void unknown_opcode(uint8_t op) const {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", op);
    bad(std::string("pickle opcode ") + hex + " at byte " + std::to_string(at_ - 1) +
        " is not one torch.save writes (protocols 2-5)");
  }

  // ('storage', torch.XStorage, key, location, numel)
  int32_t persistent(int32_t pid) {
    const Val& t = vals_[size_t(pid)];
    if (t.kind != Val::tuple || t.items.size() < 5 || vals_[size_t(t.items[0])].s != "storage")
      bad("a persistent id that is not ('storage', type, key, location, numel)");
    // The legacy format's sixth member, view metadata, is always None since PyTorch 0.4.
    if (t.items.size() >= 6 && vals_[size_t(t.items[5])].kind != Val::none)
      fail(path_, "a storage view (PyTorch < 0.4), which fovea does not read", Errc::unsupported);
    // Only the scalars are copied (make() below may move vals_): a hostile pickle could make the
    // tuple's members huge lists and reuse them through the memo.
    const Val& type = vals_[size_t(t.items[1])];
    const Val& key_v = vals_[size_t(t.items[2])];
    const Val& numel_v = vals_[size_t(t.items[4])];
    if (type.kind != Val::global || key_v.kind != Val::str || numel_v.kind != Val::integer || numel_v.i < 0)
      bad("a malformed storage reference");
    const std::string key = key_v.s, type_name = type.s;
    const int64_t numel = numel_v.i;
    std::string tn = type_name;
    for (const char* prefix : {"torch.cuda.", "torch."})
      if (tn.rfind(prefix, 0) == 0) {
        tn = tn.substr(std::strlen(prefix));
        break;
      }
    int32_t found = -1;
    for (size_t k = 0; k < std::size(kStorageTypes); ++k)
      if (tn == kStorageTypes[k].torch_name) found = int32_t(k);
    if (found < 0) fail(path_, "a storage of type " + type_name + ", which fovea does not read", Errc::unsupported);
    const int32_t v = make(Val::storage);
    vals_[size_t(v)].s = key;
    vals_[size_t(v)].i = numel;
    vals_[size_t(v)].type = found;
    return v;
  }
  std::vector<int64_t> ints(int32_t tuple, const char* what) const {
    const Val& t = vals_[size_t(tuple)];
    if (t.kind != Val::tuple && t.kind != Val::list) bad(std::string("a tensor's ") + what + " is not a tuple");
    if (t.items.size() > 16) bad(std::string("a tensor's ") + what + " has " + std::to_string(t.items.size()) + " dimensions");
    std::vector<int64_t> out;
    for (int32_t x : t.items) {
      if (vals_[size_t(x)].kind != Val::integer || vals_[size_t(x)].i < 0) bad(std::string("a tensor's ") + what + " holds a non-integer or a negative value");
      out.push_back(vals_[size_t(x)].i);
    }
    return out;
  }
  int32_t reduce(int32_t callable, int32_t args, int depth) {
    if (vals_[size_t(callable)].kind != Val::global || vals_[size_t(args)].kind != Val::tuple) return object(callable, args);
    // Copies: vals_ grows below, which would move the values references point into.
    const std::string g = vals_[size_t(callable)].s;
    // The first arguments only (all any recognised call reads): the tuple may be huge and reused.
    const std::vector<int32_t>& all = vals_[size_t(args)].items;
    const std::vector<int32_t> items(all.begin(), all.begin() + long(std::min<size_t>(all.size(), 4)));
    if (g == "collections.OrderedDict" || g == "builtins.dict") {
      const int32_t d = make(Val::dict);
      // OrderedDict([(k, v), ...]): the pairs, when given.
      if (!items.empty() && vals_[size_t(items[0])].kind == Val::list) {
        const std::vector<int32_t>& pairs = vals_[size_t(items[0])].items;  // (no make() below)
        grow(2 * pairs.size());  // copied from a list the memo may hand out again and again
        for (int32_t pr : pairs) {
          const Val& p = vals_[size_t(pr)];
          if (p.kind == Val::tuple && p.items.size() == 2) {
            const int32_t k = p.items[0], v = p.items[1];
            vals_[size_t(d)].items.push_back(k), vals_[size_t(d)].items.push_back(v);
          }
        }
      }
      return d;
    }
    if (g == "torch._utils._rebuild_tensor_v2" || g == "torch._utils._rebuild_tensor") {
      if (items.size() < 4 || vals_[size_t(items[0])].kind != Val::storage || vals_[size_t(items[1])].kind != Val::integer ||
          vals_[size_t(items[1])].i < 0)
        bad(g + " called without (storage, offset, size, stride)");
      TensorRec t;
      t.storage = items[0];
      t.offset = vals_[size_t(items[1])].i;
      t.shape = ints(items[2], "size");
      t.stride = ints(items[3], "stride");
      if (t.shape.size() != t.stride.size()) bad("a tensor whose size and stride differ in length");
      if (tensors_.size() >= (1u << 24)) fail(path_, "data.pkl: too many tensors", Errc::limit_exceeded);
      tensors_.push_back(std::move(t));
      const int32_t v = make(Val::tensor);
      vals_[size_t(v)].i = int64_t(tensors_.size() - 1);
      return v;
    }
    if (g == "torch._utils._rebuild_parameter" || g == "torch._utils._rebuild_parameter_with_state") {
      if (items.empty() || vals_[size_t(items[0])].kind != Val::tensor) bad(g + " called without a tensor");
      return items[0];
    }
    // _rebuild_from_type_v2(func, new_type, args, state): a tensor subclass; the tensor is func(*args).
    if (g == "torch._tensor._rebuild_from_type_v2" && depth == 0 && items.size() >= 3)
      return reduce(items[0], items[2], depth + 1);
    return object(callable, args);  // anything else: inert, never called
  }

  const uint8_t* p_;
  uint64_t n_, at_ = 0;
  const std::string& path_;
  std::vector<Val> vals_;
  std::vector<TensorRec> tensors_;
  std::vector<int32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, int32_t> memo_;
  size_t copied_ = 0;
};

// Whether any tensor is reachable from a value (through dicts and objects' states); each value
// is looked at once, whatever the sharing, and cycles end.
class TensorFinder {
 public:
  explicit TensorFinder(const std::vector<Val>& v) : v_(v) {}
  bool operator()(int32_t x, int depth = 0) {
    if (depth > 64) return false;
    const auto it = state_.find(x);
    if (it != state_.end()) return it->second == 2;  // 1: in progress (a cycle), 2: yes, 3: no
    state_[x] = 1;
    const Val& o = v_[size_t(x)];
    bool yes = o.kind == Val::tensor;
    if (o.kind == Val::dict)
      for (size_t k = 1; k < o.items.size() && !yes; k += 2) yes = (*this)(o.items[k], depth + 1);
    else if (o.kind == Val::object && o.state >= 0)
      yes = (*this)(o.state, depth + 1);
    state_[x] = yes ? 2 : 3;
    return yes;
  }

 private:
  const std::vector<Val>& v_;
  std::unordered_map<int32_t, int8_t> state_;
};

const Val* dict_get(const std::vector<Val>& v, const Val& d, std::string_view key, int32_t* index = nullptr) {
  for (size_t k = 0; k + 1 < d.items.size(); k += 2)
    if (v[size_t(d.items[k])].kind == Val::str && v[size_t(d.items[k])].s == key) {
      if (index) *index = d.items[k + 1];
      return &v[size_t(d.items[k + 1])];
    }
  return nullptr;
}

// name -> tensor index, walking dicts (keys joined with '.') and nn.Module objects.
// Bounded: at most max_tensors names of at most kMaxName bytes (a hostile pickle could otherwise
// name one tensor, through the memo, under a million long paths).
struct Collector {
  const std::vector<Val>& v;
  const std::string& path;
  uint64_t max_tensors;
  std::vector<std::pair<std::string, int64_t>> out;
  std::set<int32_t> seen;
  static constexpr size_t kMaxName = 1024;
  void add(std::string name, int64_t tensor) {
    if (name.size() > kMaxName)
      fail(path, "a tensor name of " + std::to_string(name.size()) + " bytes (more than " + std::to_string(kMaxName) + ")",
           Errc::limit_exceeded);
    if (out.size() >= max_tensors)
      fail(path, "more than " + std::to_string(max_tensors) + " tensors", Errc::limit_exceeded);
    out.emplace_back(std::move(name), tensor);
  }
  void walk(int32_t x, const std::string& prefix, int depth) {
    if (depth > 64 || prefix.size() > kMaxName) return;
    const Val& o = v[size_t(x)];
    if (o.kind == Val::tensor) {
      add(prefix, o.i);
      return;
    }
    if (!seen.insert(x).second) return;  // shared (tied) containers: their first name
    auto key_of = [&](int32_t k) -> std::optional<std::string> {
      const Val& kv = v[size_t(k)];
      if (kv.kind == Val::str) return kv.s.size() <= kMaxName ? std::optional<std::string>(kv.s) : std::nullopt;
      if (kv.kind == Val::integer) return std::to_string(kv.i);
      return std::nullopt;
    };
    auto join = [&](const std::string& k) { return prefix.empty() ? k : prefix + "." + k; };
    if (o.kind == Val::dict) {
      for (size_t k = 0; k + 1 < o.items.size(); k += 2)
        if (const auto key = key_of(o.items[k])) walk(o.items[k + 1], join(*key), depth + 1);
    } else if (o.kind == Val::object && o.state >= 0) {
      const Val& st = v[size_t(o.state)];
      // A module's state: its parameters and buffers, then its children (state_dict()'s order).
      if (st.kind == Val::dict && dict_get(v, st, "_parameters")) {
        for (const char* part : {"_parameters", "_buffers"}) {
          const Val* d = dict_get(v, st, part);
          if (d && d->kind == Val::dict)
            for (size_t k = 0; k + 1 < d->items.size(); k += 2)
              if (const auto key = key_of(d->items[k]); key && v[size_t(d->items[k + 1])].kind == Val::tensor)
                add(join(*key), v[size_t(d->items[k + 1])].i);
        }
        const Val* mods = dict_get(v, st, "_modules");
        if (mods && mods->kind == Val::dict)
          for (size_t k = 0; k + 1 < mods->items.size(); k += 2)
            if (const auto key = key_of(mods->items[k])) walk(mods->items[k + 1], join(*key), depth + 1);
      } else {
        walk(o.state, prefix, depth + 1);
      }
    }
  }
};

}  // namespace

int64_t TorchCheckpoint::Entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct TorchCheckpoint::Impl {
  io_detail::FileBytes bytes;
  std::vector<const std::byte*> data;  // per entry: its first element (storage + offset)
  std::map<std::string, size_t, std::less<>> by_name;
};

TorchCheckpoint::TorchCheckpoint(TorchCheckpoint&&) noexcept = default;
TorchCheckpoint& TorchCheckpoint::operator=(TorchCheckpoint&&) noexcept = default;
TorchCheckpoint::~TorchCheckpoint() = default;

bool TorchCheckpoint::looks_like(std::span<const uint8_t> head) {
  return head.size() >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4;
}

TorchCheckpoint TorchCheckpoint::open(const std::string& path, const TorchCheckpointLimits& limits) {
  TorchCheckpoint f;
  f.path_ = path;
  f.impl_ = std::make_unique<Impl>();
  f.impl_->bytes = io_detail::FileBytes::map(path);
  f.parse(limits);
  return f;
}

TorchCheckpoint TorchCheckpoint::from_bytes(std::span<const uint8_t> bytes, const std::string& name,
                                            const TorchCheckpointLimits& limits) {
  TorchCheckpoint f;
  f.path_ = name;
  f.impl_ = std::make_unique<Impl>();
  f.impl_->bytes = io_detail::FileBytes::copy(bytes);
  f.parse(limits);
  return f;
}

namespace {

// A checkpoint's pickled object and where its storages' bytes are.
struct Pickled {
  std::unique_ptr<Unpickler> up;
  int32_t top = -1;                           // the object, in up->vals()
  std::map<std::string, ZipEntry> storages;  // by key
  std::string storage_prefix;                 // how the messages name a storage: "data/" in an archive
};

// torch.save's format before PyTorch 1.6 (and with _use_new_zipfile_serialization=False): a
// sequence of pickles (magic number, protocol 1001, system info, the object, the sorted storage
// keys), then each storage in that order: an int64 element count and the elements.
Pickled read_legacy(const uint8_t* d, uint64_t n, const std::string& path, const TorchCheckpointLimits& limits) {
  Pickled out;
  static constexpr uint8_t kMagic[15] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, '.'};
  if (n < sizeof kMagic || std::memcmp(d, kMagic, sizeof kMagic) != 0)
    fail(path, "not a PyTorch checkpoint: a legacy header without torch's magic number");
  uint64_t at = sizeof kMagic;
  auto small_pickle = [&] {  // the next pickle of the sequence, and its top value
    auto u = std::make_unique<Unpickler>(d + at, n - at, path);
    const int32_t v = u->run();
    at += u->consumed();
    return std::make_pair(std::move(u), v);
  };
  {
    auto [u, v] = small_pickle();
    const Val& pv = u->vals()[size_t(v)];
    if (pv.kind != Val::integer || pv.i != 1001)
      fail(path, "a legacy checkpoint of protocol " + std::to_string(pv.i) + " (fovea reads 1001)", Errc::unsupported);
  }
  {
    auto [u, v] = small_pickle();
    const Val& info = u->vals()[size_t(v)];
    if (info.kind == Val::dict)
      if (const Val* le_v = dict_get(u->vals(), info, "little_endian"); le_v && le_v->kind == Val::boolean && le_v->i == 0)
        fail(path, "a big-endian legacy checkpoint: fovea reads little-endian ones", Errc::unsupported);
  }
  out.up = std::make_unique<Unpickler>(d + at, std::min<uint64_t>(n - at, limits.max_pickle_bytes), path);
  out.top = out.up->run();
  at += out.up->consumed();
  auto [keys_u, keys_v] = small_pickle();
  const Val& keys = keys_u->vals()[size_t(keys_v)];
  if (keys.kind != Val::list) fail(path, "a legacy checkpoint whose storage keys are not a list");
  std::map<std::string, size_t> element_size;
  for (const Val& x : out.up->vals())
    if (x.kind == Val::storage) element_size[x.s] = kStorageTypes[size_t(x.type)].size;
  for (int32_t k : keys.items) {
    const Val& key = keys_u->vals()[size_t(k)];
    if (key.kind != Val::str) fail(path, "a legacy checkpoint with a storage key that is not a string");
    const auto es = element_size.find(key.s);
    if (es == element_size.end()) fail(path, "legacy storage '" + key.s + "' is not used by the pickled object");
    if (n - at < 8) fail(path, "truncated: storage '" + key.s + "' is missing");
    const unsigned __int128 bytes = (unsigned __int128)le(d + at, 8) * es->second;
    at += 8;
    if (bytes > n - at) fail(path, "truncated: storage '" + key.s + "' runs past the end of the file");
    out.storages[key.s] = ZipEntry{at, uint64_t(bytes), true, false};
    at += uint64_t(bytes);
  }
  return out;
}

// A torch.save ZIP archive: <root>/data.pkl and the storages as <root>/data/<key>, stored.
Pickled read_archive(const uint8_t* d, uint64_t n, const std::string& path, const TorchCheckpointLimits& limits) {
  Pickled out;
  if (!TorchCheckpoint::looks_like({d, size_t(std::min<uint64_t>(n, 4))}))
    fail(path, "not a PyTorch checkpoint (a torch.save ZIP archive starts with PK\\3\\4)");
  const std::map<std::string, ZipEntry> zip = read_zip(d, n, path);
  // The archive's root folder: where data.pkl is (torch names it after the file).
  std::string root;
  bool found = false;
  for (const auto& [name, e] : zip) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash + 1, std::string::npos, "data.pkl") == 0) {
      root = name.substr(0, slash + 1);
      found = true;
      break;
    }
  }
  // TorchScript (torch.jit.save) archives hold data.pkl too, beside the model's code.
  for (const auto& [name, e] : zip)
    if (name.ends_with("/constants.pkl") || name.find("/code/") != std::string::npos)
      fail(path, "a TorchScript archive (torch.jit.save), not a torch.save checkpoint: save the model's "
                 "state_dict() with torch.save, or convert it to safetensors", Errc::unsupported);
  if (!found) fail(path, "a ZIP archive without <root>/data.pkl: not a torch.save checkpoint");
  auto readable = [&](const std::string& name, const ZipEntry& e) {
    if (e.encrypted) fail(path, "'" + name + "' is encrypted", Errc::unsupported);
    if (!e.stored)
      fail(path, "'" + name + "' is compressed; torch.save stores its entries uncompressed (was the archive "
                 "re-zipped?)", Errc::unsupported);
  };
  if (const auto bo = zip.find(root + "byteorder"); bo != zip.end()) {
    readable("byteorder", bo->second);
    const std::string order(reinterpret_cast<const char*>(d + bo->second.offset),
                            size_t(std::min<uint64_t>(bo->second.size, 16)));
    if (order != "little") fail(path, "byte order '" + order + "': fovea reads little-endian checkpoints", Errc::unsupported);
  }
  const ZipEntry& pkl = zip.at(root + "data.pkl");
  readable("data.pkl", pkl);
  if (pkl.size > limits.max_pickle_bytes)
    fail(path, "data.pkl is " + std::to_string(pkl.size) + " bytes, more than the limit of " +
                   std::to_string(limits.max_pickle_bytes), Errc::limit_exceeded);
  for (const auto& [name, e] : zip)
    if (name.size() > root.size() + 5 && name.compare(0, root.size() + 5, root + "data/") == 0) {
      const std::string key = name.substr(root.size() + 5);
      if (key.find('/') != std::string::npos) continue;
      readable(name, e);
      out.storages.emplace(key, e);
    }
  out.storage_prefix = "data/";
  out.up = std::make_unique<Unpickler>(d + pkl.offset, pkl.size, path);
  out.top = out.up->run();
  return out;
}

// Where the tensors are in the pickled object `top`: itself when it is a state dict (or an
// object to walk), else the one entry of a checkpoint dict that holds tensors (a well-known key
// such as "state_dict" or "model" first), whose key goes to root_key.
int32_t tensors_root(const std::vector<Val>& v, int32_t top, const std::string& path, std::string& root_key) {
  const Val& t = v[size_t(top)];
  TensorFinder has_tensors(v);
  if (t.kind == Val::dict) {
    bool direct = false;
    for (size_t k = 1; k < t.items.size() && !direct; k += 2) direct = v[size_t(t.items[k])].kind == Val::tensor;
    if (!direct) {
      int32_t chosen = -1;
      for (const char* key : {"state_dict", "model_state_dict", "model", "module", "model_ema", "state_dict_ema", "ema",
                              "teacher", "student", "net", "network"}) {
        int32_t idx = -1;
        if (dict_get(v, t, key, &idx) && has_tensors(idx)) {
          chosen = idx, root_key = key;
          break;
        }
      }
      if (chosen < 0) {
        std::vector<std::pair<std::string, int32_t>> with;
        for (size_t k = 0; k + 1 < t.items.size(); k += 2)
          if (v[size_t(t.items[k])].kind == Val::str && has_tensors(t.items[k + 1]))
            with.emplace_back(v[size_t(t.items[k])].s, t.items[k + 1]);
        if (with.size() == 1) chosen = with[0].second, root_key = with[0].first;
        else if (with.size() > 1) {
          std::string keys;
          for (const auto& [k, _] : with) keys += (keys.empty() ? "" : ", ") + k;
          fail(path, "a checkpoint with tensors under several keys (" + keys + "): fovea cannot tell which is the "
                     "model; save that state dict alone", Errc::unsupported);
        }
      }
      if (chosen >= 0) return chosen;
    }
  }
  return top;
}

// The error for a pickled object `t` in which no tensor was found, saying what it is.
[[noreturn]] void fail_without_tensors(const std::vector<Val>& v, const Val& t, const std::string& path) {
  std::string what = t.kind == Val::dict ? "a dict without tensors" : t.kind == Val::object ? "an object of class " + t.s + " without tensors" : "no tensors";
  if (t.kind == Val::dict) {
    std::string keys;
    for (size_t k = 0; k + 1 < t.items.size() && k < 40; k += 2)
      if (v[size_t(t.items[k])].kind == Val::str) keys += (keys.empty() ? "" : ", ") + v[size_t(t.items[k])].s;
    what += " (keys: " + keys + ")";
  }
  fail(path, "no tensors found: the pickled object is " + what);
}

// The entry of tensor `name` (its record r, its storage s), checked against the storage's bytes
// z, which it returns through z: the tensor's elements lie inside them.
TorchCheckpoint::Entry tensor_entry(const std::string& name, const TensorRec& r, const Val& s,
                                    const std::map<std::string, ZipEntry>& storages, const std::string& storage_prefix,
                                    const std::string& path, const ZipEntry*& z) {
  using Entry = TorchCheckpoint::Entry;
  const StorageType& st = kStorageTypes[size_t(s.type)];
  Entry e;
  e.name = name;
  e.dtype_name = st.dtype_name;
  e.dtype_known = st.known;
  e.dtype = st.dtype;
  e.element_size = st.size;
  e.shape = r.shape;
  e.stride = r.stride;
  e.storage_offset = uint64_t(r.offset);
  e.storage_key = s.s;
  auto bad = [&](const std::string& why) { fail(path, "tensor '" + e.name + "' " + why); };
  const std::string key_name = storage_prefix + s.s;
  const auto zi = storages.find(s.s);
  if (zi == storages.end()) bad("refers to storage '" + s.s + "', which the file does not hold");
  z = &zi->second;
  const unsigned __int128 storage_bytes = (unsigned __int128)uint64_t(s.i) * st.size;
  if (storage_bytes > z->size)
    bad("needs a storage of " + std::to_string(uint64_t(s.i)) + " elements, but " + key_name + " has " +
        std::to_string(z->size) + " bytes");
  // (Even an empty tensor's offset stays inside its storage: its data pointer is formed from it.)
  if (uint64_t(r.offset) > uint64_t(s.i))
    bad("starts at element " + std::to_string(r.offset) + " of a storage of " + std::to_string(uint64_t(s.i)));
  unsigned __int128 numel = 1, last = uint64_t(r.offset);
  for (size_t k = 0; k < r.shape.size(); ++k) {
    numel *= uint64_t(r.shape[k]);
    if (numel > ((unsigned __int128)1 << 62)) bad("has more elements than any file can hold");
    if (r.shape[k] > 0) last += (unsigned __int128)uint64_t(r.shape[k] - 1) * uint64_t(r.stride[k]);
    if (last >> 64) bad("has strides that reach past any storage");
  }
  if (numel > 0 && last >= uint64_t(s.i))
    bad("reaches element " + std::to_string(uint64_t(std::min<unsigned __int128>(last, ~uint64_t(0)))) +
        " of a storage of " + std::to_string(uint64_t(s.i)));
  // Row-major dense: every dimension of size > 1 has the stride of the ones after it.
  int64_t expect = 1;
  e.contiguous = true;
  for (size_t k = r.shape.size(); k-- > 0;) {
    if (r.shape[k] != 1 && r.stride[k] != expect) e.contiguous = false;
    expect *= r.shape[k];
  }
  return e;
}

}  // namespace

void TorchCheckpoint::parse(const TorchCheckpointLimits& limits) {
  const uint8_t* d = impl_->bytes.data();
  const uint64_t n = impl_->bytes.size();
  const Pickled p = legacy_head(d, n) ? read_legacy(d, n, path_, limits) : read_archive(d, n, path_, limits);
  const std::vector<Val>& v = p.up->vals();
  const Val& t = v[size_t(p.top)];
  object_kind_ = t.kind == Val::dict ? "state dict" : t.kind == Val::object ? "object " + t.s : "";
  if (t.kind == Val::object && t.state >= 0 && v[size_t(t.state)].kind == Val::dict &&
      dict_get(v, v[size_t(t.state)], "_parameters"))
    object_kind_ = "nn.Module " + t.s;
  const int32_t start = tensors_root(v, p.top, path_, root_key_);
  Collector col{v, path_, limits.max_tensors, {}, {}};
  if (t.kind == Val::tensor) fail(path_, "holds a single tensor, not a state dict", Errc::unsupported);
  col.walk(start, "", 0);
  if (col.out.empty()) fail_without_tensors(v, t, path_);
  // DataParallel / DDP wrap every name in "module.".
  const bool wrapped =
      std::all_of(col.out.begin(), col.out.end(), [](const auto& kv) { return kv.first.rfind("module.", 0) == 0; });
  // The tensors, checked against their storages.
  for (auto& [name, ti] : col.out) {
    const TensorRec& r = p.up->tensors()[size_t(ti)];
    const ZipEntry* z = nullptr;
    Entry e = tensor_entry(wrapped ? name.substr(7) : name, r, v[size_t(r.storage)], p.storages, p.storage_prefix, path_, z);
    if (impl_->by_name.count(e.name)) fail(path_, "tensor '" + e.name + "' appears twice");
    impl_->by_name.emplace(e.name, entries_.size());
    impl_->data.push_back(reinterpret_cast<const std::byte*>(d + z->offset) + e.storage_offset * e.element_size);
    entries_.push_back(std::move(e));
  }
}

const TorchCheckpoint::Entry* TorchCheckpoint::find(std::string_view name) const {
  const auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &entries_[it->second];
}

std::span<const std::byte> TorchCheckpoint::data(const Entry& e) const {
  if (!e.contiguous) return {};
  const size_t i = size_t(&e - entries_.data());
  return {impl_->data[i], size_t(e.numel()) * e.element_size};
}

Tensor TorchCheckpoint::load(const Entry& e) const {
  if (!e.dtype_known)
    throw Error(Errc::unsupported, "'" + path_ + "': tensor '" + e.name + "' has dtype " + e.dtype_name + ", which fovea does not handle");
  Tensor t(e.dtype, e.shape);
  const size_t es = e.element_size;
  const int64_t n = e.numel();
  if (n == 0) return t;
  const std::byte* base = impl_->data[size_t(&e - entries_.data())];
  if (e.contiguous) {
    std::memcpy(t.bytes(), base, size_t(n) * es);
    return t;
  }
  // Strided: walk the index odometer.
  const size_t rank = e.shape.size();
  std::vector<int64_t> idx(rank, 0);
  std::byte* out = t.bytes();
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (size_t j = 0; j < rank; ++j) off += idx[j] * e.stride[j];
    std::memcpy(out + size_t(k) * es, base + size_t(off) * es, es);
    for (size_t j = rank; j-- > 0;) {
      if (++idx[j] < e.shape[j]) break;
      idx[j] = 0;
    }
  }
  return t;
}

Tensor TorchCheckpoint::load_f32(const Entry& e) const { return to_f32(load(e)); }

bool looks_like_torch_checkpoint(const std::string& path) {
  // Regular files only (the reader refuses the rest): a FIFO would block here for a writer.
  const io_detail::InputFile in(path);
  if (!in.ok()) return false;
  uint8_t magic[4] = {};
  const ssize_t n = ::read(in.fd(), magic, 4);
  if (n != 4) return false;
  return legacy_head(magic, 4) || TorchCheckpoint::looks_like(magic);
}

}  // namespace fovea
