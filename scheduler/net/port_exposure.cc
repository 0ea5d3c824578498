#include "scheduler/net/port_exposure.h"

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
  Str(pk, "host_port");
  if (p.host_port) pk.pack_uint32(p.host_port);
  else pk.pack_nil();
  Str(pk, "created_ms");
  pk.pack_int64(p.created_ms);
}

}  // namespace

Result<PortExposure::Port> PortExposure::Expose(const std::string& session, uint32_t sandbox_addr, uint16_t port) {
  auto& ports = sessions_[session];
  auto it = ports.find(port);
  if (it != ports.end()) return it->second;
  if (ports.size() >= kMaxPerSession) return Status::Error("at most 16 ports per session");
  Port p{port, 0, NewPreviewToken(), "", WallMs()};
  p.url = url_base_ + p.token + "/";
  if (firewall_ && host_port_lo_) {
    for (uint32_t h = host_port_lo_; h <= host_port_hi_; ++h) {
      if (host_ports_.count(static_cast<uint16_t>(h))) continue;
      Status mapped = firewall_->MapHostPort(static_cast<uint16_t>(h), sandbox_addr, port);
      if (!mapped.ok()) return mapped;
      p.host_port = static_cast<uint16_t>(h);
      host_ports_.insert(p.host_port);
      break;
    }
  }
  proxy_->Add(p.token, sandbox_addr, port);
  ports[port] = p;
  return p;
}

void PortExposure::Unexpose(const std::string& session, uint16_t port) {
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  auto it = s->second.find(port);
  if (it == s->second.end()) return;
  Release(it->second);
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
  for (const auto& [port, p] : s->second) Release(p);
  sessions_.erase(s);
}

void PortExposure::Release(const Port& p) {
  proxy_->Remove(p.token);
  if (p.host_port == 0) return;
  host_ports_.erase(p.host_port);
  // A failure leaves the port mapped to a server that is gone (nothing answers there); the
  // table, and the mapping with it, goes with the daemon.
  if (firewall_) (void)firewall_->UnmapHostPort(p.host_port);
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
