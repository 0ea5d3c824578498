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
  // A template's forward queue: entries a daemon read but could not start soon, moved there for
  // any daemon with a free slot of that template (written and read by daemons only).
  std::string Forward(std::string_view queue, std::string_view tmpl) const {
    return Join("fwd", queue) + ":" + std::string(tmpl);
  }
  std::string Job(std::string_view id) const { return Join("job", id); }
  std::string Result(std::string_view id) const { return Join("result", id); }
  std::string Out(std::string_view id) const { return Join("out", id); }
  // Where a daemon puts a large result of `attempt` just before its FINISH moves it to Result(id)
  // (daemons only; scheduler/redis/scripts.h, FINISH).
  std::string Stage(std::string_view id, std::string_view consumer, std::string_view attempt) const {
    return Join("stage", id) + ":" + std::string(consumer) + ":" + std::string(attempt);
  }
  std::string Daemon(std::string_view consumer) const { return Join("daemon", consumer); }
  // The CLIENT SETNAME of a daemon's connection `conn`: peers judge a daemon alive while Redis
  // lists any connection named for it.
  std::string ClientName(std::string_view consumer, std::string_view conn) const {
    return "sandpoold:" + p_ + ":" + std::string(consumer) + ":" + std::string(conn);
  }
  std::string Cancel() const { return p_ + ":cancel"; }

  // Sessions (PROTOCOL.md section 12).
  std::string Session(std::string_view sid) const { return Join("session", sid); }
  std::string Sessions() const { return p_ + ":sessions"; }
  // The sessions a daemon holds, and the daemons that hold any (for finding the lost ones).
  std::string HostSessions(std::string_view consumer) const { return Join("host-sessions", consumer); }
  std::string SessionHosts() const { return p_ + ":session-hosts"; }
  // `create` of a session nobody holds yet, and every operation on a daemon's sessions.
  std::string SessionIntake(std::string_view queue) const { return Join("sreq", queue); }
  std::string SessionStream(std::string_view queue, std::string_view consumer) const {
    return Join("sreq", queue) + ":" + std::string(consumer);
  }
  // Snapshot templates: the record, the set of names (chunks are Snapshot(name) + ":<n>").
  std::string Snapshot(std::string_view name) const { return Join("snapshot", name); }
  std::string Snapshots() const { return p_ + ":snapshots"; }
  // Live output of a session's background process.
  std::string ProcessOut(std::string_view sid, std::string_view pid) const {
    return Join("pout", sid) + ":" + std::string(pid);
  }
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
