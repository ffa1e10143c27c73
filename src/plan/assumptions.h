// Every modelling assumption of `glint plan` as a named value with a unit, a default and what it means. The
// report prints them all; `--assume NAME=VALUE` overrides any of them. Code reads them by name, so a figure
// can never depend on a number that is not printed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint::plan {

struct Assumption {
  std::string name;
  double value = 0;
  double default_value = 0;
  std::string unit;
  std::string meaning;
  double min = 0, max = 0;  // accepted range for overrides (inclusive)
  bool integer = false;
};

class Assumptions {
 public:
  // The defaults (see Assumptions::Defaults in assumptions.cc for the reasoning behind each).
  static Assumptions Defaults();

  // `text` is "name=value". Unknown names and out-of-range values are errors that list what is accepted.
  Status Override(std::string_view text);
  Status Set(std::string_view name, double value);

  // The value of a known assumption; asking for an unknown name is a bug in glint.
  double Get(std::string_view name) const;
  const std::vector<Assumption>& all() const { return list_; }

 private:
  Assumption* Find(std::string_view name);
  const Assumption* Find(std::string_view name) const;
  std::vector<Assumption> list_;
};

}  // namespace glint::plan
