#include <torchbus/error.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/state.hpp>

#include <algorithm>
#include <sstream>
#include <utility>

namespace torchbus {

/// One immutable node of a composed filter. Leaves test the occurrence number or the state;
/// inner nodes combine their children.
struct detail::FilterNode {
  enum class Op : std::uint8_t { All, Every, Once, OnceOf, Before, After, When, Not, And, Or };

  Op op = Op::All;
  std::int64_t n = 0;                       ///< every, once, before, after
  std::vector<std::int64_t> occurrences;    ///< once({...}): sorted, without duplicates
  Filter::Predicate predicate;              ///< when
  std::shared_ptr<const FilterNode> left;   ///< not, and, or
  std::shared_ptr<const FilterNode> right;  ///< and, or
  bool counts = false;  ///< whether this node or one below it reads the occurrence number
};

namespace {

using Node = detail::FilterNode;
using Op = Node::Op;

std::shared_ptr<const Node> leaf(Op op, std::int64_t n) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->n = n;
  node->counts = op != Op::All;
  return node;
}

std::shared_ptr<const Node> combine(Op op, std::shared_ptr<const Node> left,
                                    std::shared_ptr<const Node> right) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->counts = left->counts || (right && right->counts);
  node->left = std::move(left);
  node->right = std::move(right);
  return node;
}

/// Whether `node` lets occurrence `count` through (`count` is meaningless for nodes that do not
/// count). Recursion without allocation; a predicate is the only indirect call.
bool holds(const Node& node, std::int64_t count, const State& state) {
  switch (node.op) {
    case Op::All:
      return true;
    case Op::Every:
      return count % node.n == 0;
    case Op::Once:
      return count == node.n;
    case Op::OnceOf:
      return std::binary_search(node.occurrences.begin(), node.occurrences.end(), count);
    case Op::Before:
      return count < node.n;
    case Op::After:
      return count > node.n;
    case Op::When:
      return node.predicate(state);
    case Op::Not:
      return !holds(*node.left, count, state);
    case Op::And:
      return holds(*node.left, count, state) && holds(*node.right, count, state);
    case Op::Or:
      return holds(*node.left, count, state) || holds(*node.right, count, state);
  }
  return false;
}

/// "{3, 0, 5}": a list as the user wrote it, for error messages.
std::string braced(const std::vector<std::int64_t>& values) {
  std::ostringstream out;
  out << '{';
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << '}';
  return out.str();
}

}  // namespace

std::int64_t occurrence(Event event, const State& state) noexcept {
  switch (event) {
    case Event::EpochStart:
    case Event::EpochEnd:
      return state.epoch + 1;
    case Event::StepStart:
    case Event::BeforeOptimizerStep:
    case Event::AfterOptimizerStep:
      return state.step + 1;
    case Event::StepEnd:
      return state.update_skipped ? 0 : state.step;
    case Event::BatchStart:
    case Event::BeforeBackward:
    case Event::AfterBackward:
    case Event::BatchEnd:
      return state.global_batch + 1;
    case Event::EvalBatchStart:
    case Event::EvalBatchEnd:
      return state.eval_batch + 1;
    case Event::PredictBatchStart:
    case Event::PredictBatchEnd:
      return state.predict_batch + 1;
    case Event::ActionStart:
    case Event::ProcessGroupStart:
    case Event::ActionEnd:
    case Event::EvalStart:
    case Event::EvalEnd:
    case Event::PredictStart:
    case Event::PredictEnd:
    case Event::Exception:
      return kNoCounter;
  }
  return kNoCounter;
}

Filter::Filter(std::shared_ptr<const detail::FilterNode> tree)
    : kind_(Kind::Tree), tree_(std::move(tree)) {}

Filter Filter::every(std::int64_t n) {
  TORCHBUS_CHECK(n >= 1, ConfigError, "every(n) needs n >= 1 (run at occurrences n, 2n, ...), got ",
                 n);
  return Filter(Kind::Every, n);
}

Filter Filter::once(std::int64_t n) {
  TORCHBUS_CHECK(n >= 1, ConfigError,
                 "once(n) needs n >= 1 (the 1-based occurrence to run at), got ", n);
  return Filter(Kind::Once, n);
}

Filter Filter::once(const std::vector<std::int64_t>& occurrences) {
  TORCHBUS_CHECK(!occurrences.empty(), ConfigError,
                 "once({n1, n2, ...}) needs at least one occurrence, got an empty list");
  for (const auto occurrence : occurrences) {
    TORCHBUS_CHECK(occurrence >= 1, ConfigError,
                   "once({n1, n2, ...}) needs occurrences >= 1 (1-based), got ", occurrence, " in ",
                   braced(occurrences));
  }
  auto node = std::make_shared<Node>();
  node->op = Op::OnceOf;
  node->counts = true;
  node->occurrences = occurrences;
  std::sort(node->occurrences.begin(), node->occurrences.end());
  node->occurrences.erase(std::unique(node->occurrences.begin(), node->occurrences.end()),
                          node->occurrences.end());
  return Filter(std::shared_ptr<const Node>(std::move(node)));
}

Filter Filter::before(std::int64_t n) {
  TORCHBUS_CHECK(n >= 2, ConfigError,
                 "before(n) needs n >= 2 (run at occurrences 1 .. n-1; before(1) never runs), got ",
                 n);
  return Filter(leaf(Op::Before, n));
}

Filter Filter::after(std::int64_t n) {
  TORCHBUS_CHECK(n >= 0, ConfigError,
                 "after(n) needs n >= 0 (run at occurrences n+1, n+2, ...), got ", n);
  return Filter(leaf(Op::After, n));
}

Filter Filter::when(Predicate predicate) {
  TORCHBUS_CHECK(static_cast<bool>(predicate), ConfigError,
                 "when(predicate) needs a callable predicate, got an empty function");
  auto node = std::make_shared<Node>();
  node->op = Op::When;
  node->predicate = std::move(predicate);
  return Filter(std::shared_ptr<const Node>(std::move(node)));
}

Filter operator|(const Filter& left, const Filter& right) {
  return Filter(combine(Op::Or, left.node(), right.node()));
}

Filter operator&(const Filter& left, const Filter& right) {
  return Filter(combine(Op::And, left.node(), right.node()));
}

Filter operator!(const Filter& filter) {
  return Filter(combine(Op::Not, filter.node(), nullptr));
}

std::shared_ptr<const detail::FilterNode> Filter::node() const {
  switch (kind_) {
    case Kind::All:
      return leaf(Op::All, 0);
    case Kind::Every:
      return leaf(Op::Every, n_);
    case Kind::Once:
      return leaf(Op::Once, n_);
    case Kind::Tree:
      return tree_;
  }
  return tree_;
}

std::int64_t Filter::count(std::optional<Event> event, const State& state) noexcept {
  const std::int64_t counted = event ? occurrence(*event, state) : kNoCounter;
  return counted == kNoCounter ? ++own_count_ : counted;
}

bool Filter::passes(std::optional<Event> event, const State& state) {
  if (kind_ == Kind::All) return true;
  if (kind_ != Kind::Tree) {
    const std::int64_t n = count(event, state);
    return n > 0 && (kind_ == Kind::Every ? n % n_ == 0 : n == n_);
  }
  if (!tree_->counts) return holds(*tree_, 0, state);
  // One occurrence number for the whole tree; 0 (a step without update) is no occurrence at all.
  const std::int64_t n = count(event, state);
  return n > 0 && holds(*tree_, n, state);
}

}  // namespace torchbus
