#include "interop/state_dict_pickle.hpp"

#include <torchbus/error.hpp>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

namespace torchbus::detail {
namespace {

// The pickle opcodes (Python's pickletools) of a protocol-2 state_dict. NEWOBJ is not among them:
// LibTorch 1.13 reads it otherwise than Python, and torch.save's state_dicts do not hold it.
enum Opcode : unsigned char {
  kMark = '(',
  kStop = '.',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBuild = 'b',
  kDict = 'd',
  kEmptyDict = '}',
  kAppends = 'e',
  kList = 'l',
  kEmptyList = ']',
  kSetItem = 's',
  kTuple = 't',
  kEmptyTuple = ')',
  kSetItems = 'u',
  kBinFloat = 'G',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kBinUnicode = 'X',
  kGlobal = 'c',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kProto = 0x80,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
};

constexpr const char* kOrderedDict = "collections\nOrderedDict\n";
/// What nn.Parameter pickles as: a call of it with (data, requires_grad, backward_hooks).
constexpr const char* kRebuildParameter = "torch._utils\n_rebuild_parameter\n";
/// What an nn.Parameter with attributes of its own pickles as under PyTorch 2.x: a call of it with
/// (data, requires_grad, backward_hooks, state), the state holding the attributes.
constexpr const char* kRebuildParameterWithState = "torch._utils\n_rebuild_parameter_with_state\n";

/// Deeper nesting is refused: a state_dict nests a few levels, and LibTorch's unpickler (and the
/// destruction of what it built) recurse once per level, so a forged pickle of a million nested
/// tuples would overflow the stack.
constexpr int kMaxDepth = 64;

std::uint32_t little_endian(const std::string& bytes, std::size_t at, std::size_t size) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < size; ++i) {
    value |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

// How an opcode changes the unpickler's stack.
struct StackEffect {
  int pops = 0;            // items taken (the first of them starts the pushed one)
  int pushes = 0;          // 0 or 1
  bool to_mark = false;    // takes the items above the topmost mark, and the mark
  bool sets_mark = false;  // MARK
};

// The size of the instruction at `at` with its argument, and its stack effect; throws on
// opcodes LibTorch's unpickler does not read (other than SETITEM, which is rewritten).
std::size_t decode(const std::string& pickle, std::size_t at, StackEffect& effect) {
  const auto need = [&](std::size_t size) {
    TORCHBUS_CHECK(at + size <= pickle.size(), DataError, "the pickle ends inside an instruction");
    return size;
  };
  effect = StackEffect{};
  switch (static_cast<unsigned char>(pickle[at])) {
    case kMark:
      effect.sets_mark = true;
      return 1;
    case kStop:
      return 1;
    case kNone:
    case kEmptyDict:
    case kEmptyList:
    case kEmptyTuple:
    case kNewTrue:
    case kNewFalse:
      effect.pushes = 1;
      return 1;
    case kTuple:
    case kList:
    case kDict:
      effect.to_mark = true;
      effect.pushes = 1;
      return 1;
    case kAppends:
    case kSetItems:
      effect.to_mark = true;
      return 1;
    case kBinPersId:
    case kTuple1:
      effect = {1, 1};
      return 1;
    case kReduce:
    case kBuild:
    case kTuple2:
      effect = {2, 1};
      return 1;
    case kTuple3:
      effect = {3, 1};
      return 1;
    case kSetItem:
      effect.pops = 2;
      return 1;
    case kBinInt1:
    case kBinGet:
      effect.pushes = 1;
      return need(2);
    case kBinPut:
    case kProto:
      return need(2);
    case kBinInt2:
      effect.pushes = 1;
      return need(3);
    case kBinInt:
    case kLongBinGet:
      effect.pushes = 1;
      return need(5);
    case kLongBinPut:
      return need(5);
    case kBinFloat:
      effect.pushes = 1;
      return need(9);
    case kLong1:
      effect.pushes = 1;
      need(2);
      return need(2 + little_endian(pickle, at + 1, 1));
    case kBinUnicode:
      effect.pushes = 1;
      need(5);
      return need(5 + static_cast<std::size_t>(little_endian(pickle, at + 1, 4)));
    case kGlobal: {
      effect.pushes = 1;
      std::size_t end = at + 1;
      for (int line = 0; line < 2; ++line) {
        end = pickle.find('\n', end);
        TORCHBUS_CHECK(end != std::string::npos, DataError,
                       "the pickle ends inside an instruction");
        ++end;
      }
      return end - at;
    }
    default:
      throw DataError(concat("the pickle holds opcode 0x", std::hex,
                             static_cast<int>(static_cast<unsigned char>(pickle[at])), std::dec,
                             " at byte ", at,
                             ", which a state_dict saved by torch.save (pickle_protocol=2, the "
                             "default) does not hold"));
  }
}

/// One instruction of the pickle.
struct Instruction {
  std::size_t at = 0;        // where it starts
  std::size_t size = 0;      // its length, with its argument
  unsigned char opcode = 0;  // its first byte
  StackEffect effect;
  /// It pushes torch._utils._rebuild_parameter (GLOBAL, or GET of a slot holding it).
  bool pushes_parameter_rebuild = false;

  bool memo_put() const { return opcode == kBinPut || opcode == kLongBinPut; }
  bool memo_get() const { return opcode == kBinGet || opcode == kLongBinGet; }
  /// SETITEM, APPENDS and SETITEMS add what they take to the item below them.
  bool adds_below() const {
    return opcode == kSetItem || opcode == kAppends || opcode == kSetItems;
  }
  /// The memo slot of a PUT or GET.
  std::uint32_t slot(const std::string& pickle) const {
    return little_endian(pickle, at + 1, size - 1);
  }
};

/// The unpickler's stack and memo as the pickle builds them. LibTorch's unpickler trusts the
/// pickle, so what it would read wrongly (an item below the topmost mark, a memo slot never set or
/// set twice, a dict of an odd number of items) or recurse into without end (deep nesting) is
/// refused here, as is what torch.save never writes and a forged file needs to build a cycle: an
/// object changed after it was read back from the memo.
class PickleStack {
 public:
  /// Where in the output the items an instruction took started.
  struct Taken {
    std::size_t first = 0;  // its first item, or its mark: where the item it pushes starts
    std::size_t last = 0;   // its last item (BUILD's state)
    /// A REDUCE of torch._utils._rebuild_parameter: where its tuple's elements start (the data
    /// first), else empty.
    std::vector<std::size_t> parameter_arguments;
  };

  /// Follows `instruction`, written from `written` on in the output; throws DataError for what is
  /// refused.
  Taken follow(const Instruction& instruction, const std::string& pickle, std::size_t written) {
    const auto& effect = instruction.effect;
    Taken taken{written, written, {}};
    int taken_depth = -1;  // the deepest item taken
    if (effect.sets_mark) marks_.emplace_back(items_.size(), written);
    std::vector<std::size_t> elements;  // of a tuple it builds
    if (effect.to_mark) taken.first = close_mark(instruction, taken_depth, elements);
    const auto changed = changed_item(instruction);
    // BUILD pushes the object it takes, changed: it keeps its memo slots.
    auto slots = instruction.opcode == kBuild ? items_[items_.size() - changed].slots
                                              : std::vector<std::uint32_t>{};
    if (effect.pops > 0) {
      taken.first = items_[items_.size() - effect.pops].start;
      taken.last = items_.back().start;
      taken.parameter_arguments = parameter_arguments(instruction);
      take(items_.size() - effect.pops, taken_depth, elements, !taken.parameter_arguments.empty());
    }
    Item pushed{taken.first, taken_depth + 1, std::move(slots), false, {}};
    for (const auto slot : pushed.slots) memo_[slot].depth = pushed.depth;
    if (instruction.memo_put()) store(instruction, pickle, written);
    if (instruction.memo_get()) pushed = read(instruction, pickle, taken.first);
    pushed.rebuilds_parameter = instruction.pushes_parameter_rebuild;
    if (is_tuple(instruction.opcode)) pushed.elements = std::move(elements);
    if (effect.pushes > 0) items_.push_back(std::move(pushed));
    if (instruction.adds_below()) deepen(items_.back(), taken_depth + 1);
    TORCHBUS_CHECK(items_.empty() || items_.back().depth <= kMaxDepth, DataError,
                   "the pickle nests deeper than ", kMaxDepth, " levels at byte ", instruction.at,
                   "; a state_dict nests a few");
    return taken;
  }

  /// Marks the memo slots stored from `written` on in the output as dropped: they were stored
  /// inside a BUILD's state, or a parameter's requires_grad, hooks and state, which are not
  /// written, and may only be read back inside what is dropped too. The reads of dropped slots
  /// from `written` on were such reads.
  void drop_slots_from(std::size_t written) {
    for (auto slot = memo_.rbegin(); slot != memo_.rend() && slot->written_at >= written; ++slot) {
      slot->dropped = true;
    }
    while (!dropped_reads_.empty() && dropped_reads_.back().written_at >= written) {
      dropped_reads_.pop_back();
    }
  }

  /// What was written from `from` on in the output moved by `by` bytes (the rewrite inserted or
  /// erased bytes before it): the positions kept of it move too.
  void shift_positions(std::size_t from, std::ptrdiff_t by) {
    const auto shift = [from, by](std::size_t& position) {
      if (position >= from)
        position = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(position) + by);
    };
    for (auto& item : items_) {
      shift(item.start);
      for (auto& element : item.elements) shift(element);
    }
    for (auto& mark : marks_) shift(mark.second);
    for (auto& slot : memo_) shift(slot.written_at);
    for (auto& read : dropped_reads_) shift(read.written_at);
  }

  /// At the end of the pickle: throws DataError for a dropped slot read back in what is written.
  void check_dropped_reads() const {
    if (dropped_reads_.empty()) return;
    const auto& first = dropped_reads_.front();
    throw DataError(concat("the pickle reads memo slot ", first.slot, " at byte ", first.at,
                           ", stored inside what the rewrite drops (a BUILD's state, or a "
                           "parameter's requires_grad, hooks and state)"));
  }

 private:
  // An item on the stack: where it starts in the output, how deeply it nests (0: a scalar), and
  // the memo slots it was stored in or read back from.
  struct Item {
    std::size_t start = 0;
    int depth = 0;
    std::vector<std::uint32_t> slots;
    bool rebuilds_parameter = false;    // torch._utils._rebuild_parameter (not written)
    std::vector<std::size_t> elements;  // a tuple built here: where its elements start
  };
  struct Slot {
    int depth = 0;               // final once the slot is read: its object changes no more
    bool read = false;           // read back: its object may not change
    std::size_t written_at = 0;  // where in the output it was stored
    bool dropped = false;        // stored inside the state of a BUILD, which is not written
  };
  struct DroppedRead {
    std::size_t written_at = 0;  // where in the output the GET would be
    std::uint32_t slot = 0;
    std::size_t at = 0;  // where in the pickle
  };

  static bool is_tuple(unsigned char opcode) {
    return opcode == kTuple || opcode == kTuple1 || opcode == kTuple2 || opcode == kTuple3;
  }

  /// Takes the items from `from` on, keeping the deepest in `taken_depth` and where each starts in
  /// `starts`. torch._utils._rebuild_parameter, which is not written, may only be called: taken as
  /// the first item when `calls_parameter_rebuild`.
  void take(std::size_t from, int& taken_depth, std::vector<std::size_t>& starts,
            bool calls_parameter_rebuild = false) {
    for (auto i = from; i < items_.size(); ++i) {
      taken_depth = std::max(taken_depth, items_[i].depth);
      starts.push_back(items_[i].start);
      TORCHBUS_CHECK(!items_[i].rebuilds_parameter || (calls_parameter_rebuild && i == from),
                     DataError,
                     "the pickle uses torch._utils._rebuild_parameter other than by calling it "
                     "(nn.Parameter's pickle calls it)");
    }
    items_.resize(from);
  }

  /// For a REDUCE of torch._utils._rebuild_parameter: where the elements of its tuple of
  /// arguments start (the data first); empty for every other instruction.
  std::vector<std::size_t> parameter_arguments(const Instruction& instruction) const {
    if (instruction.opcode != kReduce || !items_[items_.size() - 2].rebuilds_parameter) return {};
    const auto& arguments = items_.back().elements;
    // Two at least: the tuple's closing instruction then goes with what is dropped.
    TORCHBUS_CHECK(arguments.size() >= 2, DataError,
                   "the pickle calls torch._utils._rebuild_parameter at byte ", instruction.at,
                   " without a tuple of (data, requires_grad, backward_hooks[, state]) made there");
    return arguments;
  }

  /// TUPLE, LIST, DICT, APPENDS and SETITEMS: takes the items above the topmost mark, and the
  /// mark; returns where the mark was written.
  std::size_t close_mark(const Instruction& instruction, int& taken_depth,
                         std::vector<std::size_t>& starts) {
    TORCHBUS_CHECK(!marks_.empty(), DataError, "the pickle closes a mark it never opened");
    const auto [level, mark_start] = marks_.back();
    marks_.pop_back();
    const auto opcode = instruction.opcode;
    TORCHBUS_CHECK((opcode != kDict && opcode != kSetItems) || (items_.size() - level) % 2 == 0,
                   DataError, "the pickle makes a dict of an odd number of items at byte ",
                   instruction.at);
    TORCHBUS_CHECK(instruction.effect.pushes > 0 || level > floor(), DataError,
                   "the pickle adds items to nothing at byte ", instruction.at);
    take(level, taken_depth, starts);
    return mark_start;
  }

  /// The stack size at the topmost mark: the items below it may not be taken.
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back().first; }

  /// Checks that the items `instruction` takes (and changes) are above the topmost mark, and that
  /// the object it changes was not read back from the memo; returns that object's place counted
  /// from the top of the stack (0: none).
  std::size_t changed_item(const Instruction& instruction) const {
    const auto opcode = instruction.opcode;
    const std::size_t needed =
        instruction.effect.pops + (opcode == kSetItem || instruction.memo_put() ? 1 : 0);
    TORCHBUS_CHECK(items_.size() >= floor() + needed, DataError,
                   "the pickle takes more items than it pushed since its last mark at byte ",
                   instruction.at);
    const std::size_t changed = opcode == kSetItem         ? 3
                                : opcode == kBuild         ? 2
                                : instruction.adds_below() ? 1
                                                           : 0;
    if (changed > 0) {
      TORCHBUS_CHECK(!items_[items_.size() - changed].rebuilds_parameter, DataError,
                     "the pickle changes torch._utils._rebuild_parameter at byte ", instruction.at);
      const auto& slots = items_[items_.size() - changed].slots;
      const bool read_back = std::any_of(slots.begin(), slots.end(),
                                         [&](std::uint32_t slot) { return memo_[slot].read; });
      TORCHBUS_CHECK(!read_back, DataError,
                     "the pickle changes an object after reading it back from the memo at byte ",
                     instruction.at);
    }
    return changed;
  }

  /// PUT: stores the top item in the next memo slot (torch.save numbers them 0, 1, ...).
  void store(const Instruction& instruction, const std::string& pickle, std::size_t written) {
    const auto slot = instruction.slot(pickle);
    TORCHBUS_CHECK(slot == memo_.size(), DataError, "the pickle stores memo slot ", slot,
                   " at byte ", instruction.at, "; expected slot ", memo_.size(),
                   " (torch.save counts up)");
    memo_.push_back({items_.back().depth, false, written, false});
    items_.back().slots.push_back(slot);
  }

  /// GET: the item read back from a stored memo slot, which from then on may not change.
  Item read(const Instruction& instruction, const std::string& pickle, std::size_t start) {
    const auto slot = instruction.slot(pickle);
    TORCHBUS_CHECK(slot < memo_.size(), DataError, "the pickle reads memo slot ", slot, " at byte ",
                   instruction.at, ", which it never stored");
    // Decided when what it is read into is dropped too, or at the end (check_dropped_reads).
    if (memo_[slot].dropped) dropped_reads_.push_back({start, slot, instruction.at});
    memo_[slot].read = true;
    return {start, memo_[slot].depth, {slot}, false, {}};
  }

  /// What APPENDS, SETITEMS and SETITEM take, `depth` deep, goes into `target` (and its slots).
  void deepen(Item& target, int depth) {
    target.depth = std::max(target.depth, depth);
    for (const auto slot : target.slots) memo_[slot].depth = target.depth;
  }

  std::vector<Item> items_;
  std::vector<std::pair<std::size_t, std::size_t>> marks_;  // (stack size, where in the output)
  std::vector<Slot> memo_;                                  // slots 0, 1, ... in order
  std::vector<DroppedRead> dropped_reads_;  // of dropped slots, in output order, not yet dropped
};

}  // namespace

std::string unpicklable_state_dict(const std::string& pickle) {
  std::string out;
  out.reserve(pickle.size() + 64);
  PickleStack stack;
  std::set<std::uint32_t> ordered_dict_memo;  // memo slots holding collections.OrderedDict
  std::set<std::uint32_t> parameter_memo;     // memo slots holding _rebuild_parameter
  // 0: nothing pending; 1: OrderedDict is the callable on top; 2: its empty argument follows.
  int pending = 0;
  bool after_ordered_dict_global = false;
  bool after_parameter_global = false;
  for (std::size_t at = 0; at < pickle.size();) {
    Instruction instruction;
    instruction.at = at;
    instruction.size = decode(pickle, at, instruction.effect);
    instruction.opcode = static_cast<unsigned char>(pickle[at]);
    const auto opcode = instruction.opcode;
    const auto size = instruction.size;
    const bool ordered_dict_global =
        opcode == kGlobal && pickle.compare(at + 1, size - 1, kOrderedDict) == 0;
    const bool parameter_global =
        opcode == kGlobal && (pickle.compare(at + 1, size - 1, kRebuildParameter) == 0 ||
                              pickle.compare(at + 1, size - 1, kRebuildParameterWithState) == 0);
    instruction.pushes_parameter_rebuild =
        parameter_global ||
        (instruction.memo_get() && parameter_memo.count(instruction.slot(pickle)) > 0);
    const auto taken = stack.follow(instruction, pickle, out.size());
    if (opcode == kProto) {
      TORCHBUS_CHECK(at == 0, DataError, "the pickle names its protocol again at byte ", at,
                     "; torch.save names it once, at byte 0");
      const auto protocol = little_endian(pickle, at + 1, 1);
      TORCHBUS_CHECK(protocol <= 2, DataError, "the pickle has protocol ", protocol,
                     "; state_dicts are read in torch.save's default pickle_protocol=2");
      out.append(pickle, at, size);
    } else if (ordered_dict_global) {
      pending = 1;
    } else if (instruction.memo_put() && after_ordered_dict_global) {
      ordered_dict_memo.insert(instruction.slot(pickle));
    } else if (instruction.memo_get() && ordered_dict_memo.count(instruction.slot(pickle)) > 0) {
      pending = 1;
    } else if (instruction.memo_put() && after_parameter_global) {
      parameter_memo.insert(instruction.slot(pickle));
    } else if (instruction.pushes_parameter_rebuild) {
      // Not written: the REDUCE that calls it writes its data alone.
    } else if (!taken.parameter_arguments.empty()) {
      // nn.Parameter: its data (a tensor) stands for it; requires_grad, the hooks and the
      // attributes' state are dropped (a state_dict's values are tensors; loading copies them into
      // the module's parameters).
      const auto& arguments = taken.parameter_arguments;  // two at least (parameter_arguments)
      out.erase(arguments[1]);
      stack.drop_slots_from(arguments[1]);
      // A tuple of four (the state's call) opens with a MARK before its data: dropped too. The
      // tuple is the REDUCE's last item; what it wrote before the data is that MARK.
      const auto mark_size = arguments[0] - taken.last;
      out.erase(taken.last, mark_size);
      stack.shift_positions(arguments[0], -static_cast<std::ptrdiff_t>(mark_size));
    } else if (pending == 1 && opcode == kEmptyTuple) {
      pending = 2;
    } else if (pending == 2 && opcode == kReduce) {
      out.push_back(static_cast<char>(kEmptyDict));
      pending = 0;
    } else {
      TORCHBUS_CHECK(pending == 0, DataError,
                     "the pickle calls collections.OrderedDict with arguments at byte ", at,
                     "; a state_dict calls it without");
      if (opcode == kSetItem) {
        // LibTorch reads SETITEMS only: a mark before the key (the first item taken) makes one.
        out.insert(taken.first, 1, static_cast<char>(kMark));
        stack.shift_positions(taken.first, 1);
        out.push_back(static_cast<char>(kSetItems));
      } else if (opcode == kBuild) {
        // BUILD sets an OrderedDict's attributes (a state_dict's `_metadata`): the attributes
        // are dropped (LibTorch's unpickler builds only its own classes).
        out.erase(taken.last);
        stack.drop_slots_from(taken.last);  // the slots stored inside the state are the latest
      } else {
        out.append(pickle, at, size);
      }
    }
    after_ordered_dict_global = ordered_dict_global;
    after_parameter_global = parameter_global;
    at += size;
    if (opcode == kStop) break;  // what follows is not read
  }
  stack.check_dropped_reads();
  return out;
}

}  // namespace torchbus::detail
