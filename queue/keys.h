// Redis key and channel names (PROTOCOL.md section 1). All share one prefix.
#pragma once

#include <string>
#include <string_view>

namespace sandpool {

class Keys {
 public:
  explicit Keys(std::string prefix = "sandpool") : p_(std::move(prefix)) {}

  static constexpr std::string_view kGroup = "workers";

  std::string Queue(std::string_view queue) const { return Join("q", queue); }
  std::string Job(std::string_view id) const { return Join("job", id); }
  std::string Result(std::string_view id) const { return Join("result", id); }
  std::string Out(std::string_view id) const { return Join("out", id); }
  std::string Daemon(std::string_view consumer) const { return Join("daemon", consumer); }
  std::string Cancel() const { return p_ + ":cancel"; }
  std::string Dead() const { return p_ + ":dead"; }
  const std::string& prefix() const { return p_; }

 private:
  std::string Join(std::string_view kind, std::string_view name) const {
    std::string s = p_;
    s += ':';
    s += kind;
    s += ':';
    s += name;
    return s;
  }
  std::string p_;
};

}  // namespace sandpool
