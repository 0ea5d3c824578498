#include "scheduler/port_exposure.h"

#include <msgpack.hpp>

#include "common/clock.h"

namespace sandpool {
namespace {

void Str(msgpack::packer<msgpack::sbuffer>& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void Pack(msgpack::packer<msgpack::sbuffer>& pk, const PortExposure::Port& p) {
  pk.pack_map(5);
  Str(pk, "port");
  pk.pack_uint32(p.port);
  Str(pk, "protocol");
  Str(pk, "http");
  Str(pk, "url");
  Str(pk, p.url);
  Str(pk, "host_port");  // host ports (a DNAT per exposure) are not served yet
  pk.pack_nil();
  Str(pk, "created_ms");
  pk.pack_int64(p.created_ms);
}

}  // namespace

Result<PortExposure::Port> PortExposure::Expose(const std::string& session, uint32_t sandbox_addr, uint16_t port) {
  auto& ports = sessions_[session];
  auto it = ports.find(port);
  if (it != ports.end()) return it->second;
  if (ports.size() >= kMaxPerSession) return Status::Error("at most 16 ports per session");
  Port p{port, NewPreviewToken(), "", WallMs()};
  p.url = url_base_ + p.token + "/";
  proxy_->Add(p.token, sandbox_addr, port);
  ports[port] = p;
  return p;
}

void PortExposure::Unexpose(const std::string& session, uint16_t port) {
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  auto it = s->second.find(port);
  if (it == s->second.end()) return;
  proxy_->Remove(it->second.token);
  s->second.erase(it);
  if (s->second.empty()) sessions_.erase(s);
}

std::vector<PortExposure::Port> PortExposure::List(const std::string& session) const {
  std::vector<Port> out;
  auto s = sessions_.find(session);
  if (s != sessions_.end()) {
    for (const auto& [port, p] : s->second) out.push_back(p);
  }
  return out;
}

void PortExposure::Clear(const std::string& session) {
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  for (const auto& [port, p] : s->second) proxy_->Remove(p.token);
  sessions_.erase(s);
}

std::string PortExposure::Encode(const Port& p) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  Pack(pk, p);
  return std::string(buf.data(), buf.size());
}

std::string PortExposure::EncodeList(const std::vector<Port>& ports) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(1);
  Str(pk, "ports");
  pk.pack_array(static_cast<uint32_t>(ports.size()));
  for (const Port& p : ports) Pack(pk, p);
  return std::string(buf.data(), buf.size());
}

}  // namespace sandpool
