#include <torchbus/batch_limit.hpp>
#include <torchbus/error.hpp>

#include <cmath>
#include <sstream>

namespace torchbus {

BatchLimit BatchLimit::count(std::int64_t batches) {
  BatchLimit limit;
  limit.kind_ = Kind::Count;
  limit.count_ = batches;
  return limit;
}

BatchLimit BatchLimit::fraction(double share) {
  BatchLimit limit;
  limit.kind_ = Kind::Fraction;
  limit.fraction_ = share;
  return limit;
}

bool BatchLimit::is_all() const noexcept {
  return kind_ == Kind::All || (kind_ == Kind::Fraction && fraction_ == 1.0);
}

bool BatchLimit::needs_size() const noexcept {
  return kind_ == Kind::Fraction && !is_all();
}

void BatchLimit::validate(const char* option) const {
  if (kind_ == Kind::Count) {
    TORCHBUS_CHECK(count_ >= 1, ConfigError, option,
                   " must be a count of batches >= 1 or a fraction in (0, 1], got the count ",
                   count_);
  } else if (kind_ == Kind::Fraction) {
    TORCHBUS_CHECK(std::isfinite(fraction_) && fraction_ > 0.0 && fraction_ <= 1.0, ConfigError,
                   option,
                   " must be a count of batches >= 1 or a fraction in (0, 1], got the "
                   "fraction ",
                   fraction_);
  }
}

std::int64_t BatchLimit::batches_per_pass(std::optional<std::int64_t> size,
                                          const char* option) const {
  if (is_all()) return -1;
  if (kind_ == Kind::Count) return count_;
  TORCHBUS_CHECK(size.has_value(), ConfigError, option, " is the fraction ", fraction_,
                 " of the batches, but the data's number of batches is unknown (a torch::data "
                 "loader or a BatchSource without size()); give a count of batches instead, or "
                 "data whose size is known (e.g. a std::vector of batches)");
  const auto batches =
      static_cast<std::int64_t>(std::floor(fraction_ * static_cast<double>(*size)));
  TORCHBUS_CHECK(batches >= 1 || *size == 0, ConfigError, option, " is the fraction ", fraction_,
                 " of ", *size,
                 " batches, which rounds down to 0 batches; expected a fraction "
                 "that keeps at least one batch, or a count");
  return batches;
}

std::string BatchLimit::to_string() const {
  if (kind_ == Kind::All) return "all";
  if (kind_ == Kind::Count) return std::to_string(count_);
  std::ostringstream out;
  out << fraction_;
  return out.str();
}

}  // namespace torchbus
