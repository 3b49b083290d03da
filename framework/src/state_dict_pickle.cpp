#include "state_dict_pickle.hpp"

#include <torchbus/error.hpp>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

namespace torchbus::detail {
namespace {

// The pickle opcodes (Python's pickletools) of a protocol-2 state_dict.
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

}  // namespace

std::string unpicklable_state_dict(const std::string& pickle) {
  std::string out;
  out.reserve(pickle.size() + 64);
  // The unpickler's stack: where each item starts in `out`, how deeply it nests (0: a scalar),
  // and the memo slots it was stored in or read back from. LibTorch's unpickler trusts the pickle,
  // so what it would read wrongly (an item below the topmost mark, a memo slot never set or set
  // twice, a dict of an odd number of items, NEWOBJ, which it reads otherwise than Python) or
  // recurse into without end (deep nesting) is refused here, as is what torch.save never writes and
  // a forged file needs to build a cycle: an object changed after it was read back from the memo.
  struct Item {
    std::size_t start = 0;
    int depth = 0;
    std::vector<std::uint32_t> slots;
  };
  std::vector<Item> items;
  std::vector<std::pair<std::size_t, std::size_t>> marks;  // (stack size, where in `out`)
  struct Slot {
    int depth = 0;               // final once the slot is read: its object changes no more
    bool read = false;           // read back: its object may not change
    std::size_t written_at = 0;  // where in `out` it was stored
    bool dropped = false;        // stored inside the state of a BUILD, which is not written
  };
  std::vector<Slot> memo;                     // slots 0, 1, ... as torch.save numbers them
  std::set<std::uint32_t> ordered_dict_memo;  // memo slots holding collections.OrderedDict
  // 0: nothing pending; 1: OrderedDict is the callable on top; 2: its empty argument follows.
  int pending = 0;
  bool after_ordered_dict_global = false;
  for (std::size_t at = 0; at < pickle.size();) {
    StackEffect effect;
    const std::size_t size = decode(pickle, at, effect);
    const auto opcode = static_cast<unsigned char>(pickle[at]);
    const bool memo_put = opcode == kBinPut || opcode == kLongBinPut;
    const bool memo_get = opcode == kBinGet || opcode == kLongBinGet;
    const bool ordered_dict_global =
        opcode == kGlobal && pickle.compare(at + 1, size - 1, kOrderedDict) == 0;
    const std::size_t start = out.size();

    // Stack bookkeeping on the input's semantics; the start of a pushed item is the start of the
    // first item it takes (or of its mark), else where its instruction is written.
    std::size_t item_start = start;
    int taken_depth = -1;  // the deepest item taken
    const auto take = [&](std::size_t from) {
      for (auto i = from; i < items.size(); ++i)
        taken_depth = std::max(taken_depth, items[i].depth);
      items.resize(from);
    };
    if (effect.sets_mark) marks.emplace_back(items.size(), start);
    if (effect.to_mark) {
      TORCHBUS_CHECK(!marks.empty(), DataError, "the pickle closes a mark it never opened");
      const auto [level, mark_start] = marks.back();
      marks.pop_back();
      TORCHBUS_CHECK((opcode != kDict && opcode != kSetItems) || (items.size() - level) % 2 == 0,
                     DataError, "the pickle makes a dict of an odd number of items at byte ", at);
      TORCHBUS_CHECK(effect.pushes > 0 || level > (marks.empty() ? 0 : marks.back().first),
                     DataError, "the pickle adds items to nothing at byte ", at);
      take(level);
      item_start = mark_start;
    }
    const std::size_t floor = marks.empty() ? 0 : marks.back().first;  // items below the mark
    const bool changes_below = opcode == kSetItem || opcode == kAppends || opcode == kSetItems;
    const std::size_t needed = effect.pops + (opcode == kSetItem || memo_put ? 1 : 0);
    TORCHBUS_CHECK(items.size() >= floor + needed, DataError,
                   "the pickle takes more items than it pushed since its last mark at byte ", at);
    // The object the instruction changes, counted from the top of the stack (0: none).
    const std::size_t changed = opcode == kSetItem ? 3
                                : opcode == kBuild ? 2
                                : changes_below    ? 1
                                                   : 0;
    if (changed > 0) {
      const auto& target = items[items.size() - changed];
      const bool read_back = std::any_of(target.slots.begin(), target.slots.end(),
                                         [&](std::uint32_t slot) { return memo[slot].read; });
      TORCHBUS_CHECK(!read_back, DataError,
                     "the pickle changes an object after reading it back from the memo at byte ",
                     at);
    }
    // BUILD pushes the object it takes, changed: it keeps its memo slots.
    auto built_slots =
        opcode == kBuild ? items[items.size() - changed].slots : std::vector<std::uint32_t>{};
    std::size_t last_taken_start = start;
    if (effect.pops > 0) {
      item_start = items[items.size() - effect.pops].start;
      last_taken_start = items.back().start;
      take(items.size() - effect.pops);
    }
    Item pushed{item_start, taken_depth + 1, std::move(built_slots)};
    for (const auto slot : pushed.slots) memo[slot].depth = pushed.depth;
    if (memo_put) {
      const auto slot = little_endian(pickle, at + 1, size - 1);
      TORCHBUS_CHECK(slot == memo.size(), DataError, "the pickle stores memo slot ", slot,
                     " at byte ", at, "; expected slot ", memo.size(), " (torch.save counts up)");
      memo.push_back({items.back().depth, false, start, false});
      items.back().slots.push_back(slot);
    }
    if (memo_get) {
      const auto slot = little_endian(pickle, at + 1, size - 1);
      TORCHBUS_CHECK(slot < memo.size(), DataError, "the pickle reads memo slot ", slot,
                     " at byte ", at, ", which it never stored");
      TORCHBUS_CHECK(!memo[slot].dropped, DataError, "the pickle reads memo slot ", slot,
                     " at byte ", at, ", stored inside the state of a BUILD (which is dropped)");
      memo[slot].read = true;
      pushed = {item_start, memo[slot].depth, {slot}};
    }
    if (effect.pushes > 0) items.push_back(std::move(pushed));
    if (changes_below) {
      // What APPENDS, SETITEMS and SETITEM take goes into the item below (and its memo slots).
      auto& target = items.back();
      target.depth = std::max(target.depth, taken_depth + 1);
      for (const auto slot : target.slots) memo[slot].depth = target.depth;
    }
    TORCHBUS_CHECK(items.empty() || items.back().depth <= kMaxDepth, DataError,
                   "the pickle nests deeper than ", kMaxDepth, " levels at byte ", at,
                   "; a state_dict nests a few");
    if (opcode == kProto) {
      const auto protocol = little_endian(pickle, at + 1, 1);
      TORCHBUS_CHECK(protocol <= 2, DataError, "the pickle has protocol ", protocol,
                     "; state_dicts are read in torch.save's default pickle_protocol=2");
      out.append(pickle, at, size);
    } else if (ordered_dict_global) {
      pending = 1;
    } else if (memo_put && after_ordered_dict_global) {
      ordered_dict_memo.insert(little_endian(pickle, at + 1, size - 1));
    } else if (memo_get && ordered_dict_memo.count(little_endian(pickle, at + 1, size - 1)) > 0) {
      pending = 1;
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
        out.insert(item_start, 1, static_cast<char>(kMark));
        out.push_back(static_cast<char>(kSetItems));
      } else if (opcode == kBuild) {
        // BUILD sets an OrderedDict's attributes (a state_dict's `_metadata`): the attributes
        // are dropped (LibTorch's unpickler builds only its own classes).
        out.erase(last_taken_start);
        // The slots stored inside the state are the latest ones.
        for (auto slot = memo.rbegin(); slot != memo.rend() && slot->written_at >= last_taken_start;
             ++slot) {
          slot->dropped = true;
        }
      } else {
        out.append(pickle, at, size);
      }
    }
    after_ordered_dict_global = ordered_dict_global;
    at += size;
    if (opcode == kStop) break;  // what follows is not read
  }
  return out;
}

}  // namespace torchbus::detail
