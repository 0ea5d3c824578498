#include "scheduler/sessions/lost_hosts.h"

#include <optional>
#include <set>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "scheduler/jobs/intake.h"
#include "scheduler/redis/liveness.h"
#include "scheduler/redis/scripts.h"

namespace sandpool {
namespace {

constexpr size_t kScanBatch = 100;

}  // namespace

void LostHosts::Heartbeat() {
  FindLostHosts();
  ExpireCreates();
}

void LostHosts::FindLostHosts() {
  cmd_->Command({"SMEMBERS", keys_.SessionHosts()}, [this](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements == 0) return;
    std::vector<std::string> hosts;
    for (size_t i = 0; i < r->elements; ++i) hosts.push_back(ReplyString(r->element[i]));
    FindLiveDaemons(cmd_, keys_, config_, [this, hosts](std::optional<std::set<std::string>> alive) {
      if (!alive) return;
      for (const std::string& h : hosts) {
        if (alive->count(h) == 0) AnswerLostHost(h);
      }
    });
  });
}

void LostHosts::AnswerLostHost(const std::string& consumer) {
  std::string message = "the host holding the session (" + consumer + ") is gone";
  cmd_->Eval(kSessionLoseScript, {"1", keys_.HostSessions(consumer), keys_.Session(""), message},
             [consumer](redisReply* r) {
               if (r != nullptr && r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
                 LogWarn("sessions of a daemon that is gone marked lost",
                         {{"consumer", consumer}, {"count", static_cast<uint64_t>(r->integer)}});
               }
             });
  std::string stream = keys_.SessionStream(config_.queue, consumer);
  // Operations it had taken and not answered: they may have half happened.
  cmd_->Command({"XPENDING", stream, std::string(Keys::kGroup), "-", "+", std::to_string(kScanBatch), consumer},
                [this, stream](redisReply* p) {
                  if (p == nullptr || p->type != REDIS_REPLY_ARRAY || p->elements == 0) return;
                  std::vector<std::string> args = {"XCLAIM", stream, std::string(Keys::kGroup), config_.consumer, "1000"};
                  for (size_t i = 0; i < p->elements; ++i) {
                    if (p->element[i]->type == REDIS_REPLY_ARRAY && p->element[i]->elements > 0) {
                      args.push_back(ReplyString(p->element[i]->element[0]));
                    }
                  }
                  cmd_->Command(args, [this, stream](redisReply* c) {
                    if (c == nullptr || c->type != REDIS_REPLY_ARRAY) return;
                    for (size_t i = 0; i < c->elements; ++i) {
                      redisReply* en = c->element[i];
                      if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
                      answers_->Entry(stream, ReplyString(en->element[0]), ReplyFields(en->element[1]),
                                      ErrorCode::kWorkerLost, "the daemon holding the session died while this operation ran");
                    }
                  });
                });
  // New ones: session_lost (a destroy is done: the record goes; the files go if the host returns).
  cmd_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT", std::to_string(kScanBatch),
                 "STREAMS", stream, ">"},
                [this, stream, consumer, message](redisReply* r) {
                  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;
                  for (size_t i = 0; i < r->elements; ++i) {
                    redisReply* s = r->element[i];
                    if (s->type != REDIS_REPLY_ARRAY || s->elements != 2) continue;
                    for (size_t k = 0; k < s->element[1]->elements; ++k) {
                      redisReply* en = s->element[1]->element[k];
                      if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
                      std::string entry = ReplyString(en->element[0]);
                      auto fields = ReplyFields(en->element[1]);
                      auto decoded = DecodeSessionRequest(fields["req"], config_.limits, limits_);
                      auto* req = std::get_if<SessionRequest>(&decoded);
                      if (req != nullptr && req->op == SessionOp::kDestroy) {
                        registry_->Forget(req->session, consumer);
                        OpResult ok;
                        ok.id = req->id;
                        ok.op = "destroy";
                        ok.session = req->session;
                        ok.value = "\x80";
                        EncodedOpAnswer bytes = EncodeOpAnswer(ok);
                        ledger_->Answer(req->id, stream, entry, bytes.result, bytes.event);
                        continue;
                      }
                      answers_->Entry(stream, entry, fields, ErrorCode::kSessionLost, message);
                    }
                  }
                });
}

void LostHosts::ExpireCreates() {
  std::string intake = keys_.SessionIntake(config_.queue);
  cmd_->Command({"XRANGE", intake, "-", "+", "COUNT", "20"}, [this, intake](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;
    int64_t now = WallMs();
    for (size_t i = 0; i < r->elements; ++i) {
      redisReply* en = r->element[i];
      if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
      std::string entry = ReplyString(en->element[0]);
      auto fields = ReplyFields(en->element[1]);
      auto decoded = DecodeSessionRequest(fields["req"], config_.limits, limits_);
      auto* req = std::get_if<SessionRequest>(&decoded);
      uint64_t wait_ms = req ? req->create.wait_ms : 30000;
      if (now - EntryMs(entry) < static_cast<int64_t>(wait_ms)) continue;
      OpResult res;
      res.id = req ? req->id : "entry-" + entry;
      res.op = req ? std::string(SessionOpOf(req->op).name) : "create";
      res.session = req ? req->session : "";
      res.error = JobError{ErrorCode::kHostFull, "no daemon had room for a new session within " +
                                                     std::to_string(wait_ms) + " ms"};
      EncodedOpAnswer bytes = EncodeOpAnswer(res);
      cmd_->Eval(kSessionExpireScript, {"3", intake, keys_.Result(res.id), keys_.Out(res.id), entry,
                                        std::string(Keys::kGroup), std::move(bytes.result),
                                        std::to_string(config_.result_ttl_s), std::move(bytes.event)},
                 [](redisReply*) {});
    }
  });
}

}  // namespace sandpool
