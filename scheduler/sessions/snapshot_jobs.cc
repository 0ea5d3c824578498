// Sessions' snapshot work (sessions.h): taking and deleting snapshots (the `snapshot` and
// `snapshot_delete` operations; the images themselves are snapshots.h's), and one-shot jobs on
// snapshot templates, each run in an internal session made from the snapshot and destroyed after.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/fd.h"
#include "scheduler/jobs/claim_settle.h"
#include "scheduler/sessions/sessions.h"

namespace sandpool {

// ---- Snapshots (snapshots.h) ---------------------------------------------------------------------

void Sessions::TakeSnapshot(Entry& e, Op op) {
  if (e.state != State::kRunning && e.state != State::kStopped) {
    AnswerError(op, ErrorCode::kSessionBusy, std::string("the session is ") + StateName(e.state));
    return;
  }
  auto shared = std::make_shared<Op>(std::move(op));
  std::string name = shared->req.name;
  snapshots_->CheckFree(name, [this, shared, name](Status free) {
    if (!free.ok()) {
      AnswerError(*shared, free.sys_errno() == EEXIST ? ErrorCode::kExists : ErrorCode::kInternal, free.message());
      return;
    }
    auto it = sessions_.find(shared->req.session);
    if (it == sessions_.end() || (it->second.state != State::kRunning && it->second.state != State::kStopped)) {
      AnswerError(*shared, ErrorCode::kSessionBusy, "the session changed state");
      return;
    }
    Entry& held = it->second;
    std::string base = held.meta.base, staging = snapshots_->StagingImage(name);
    uint64_t disk_bytes = held.meta.disk_bytes;
    auto copied = [this, shared, name, base, disk_bytes, staging](std::string error, uint64_t data_bytes) {
      if (error.empty() && data_bytes > config_.max_snapshot_bytes) {
        error = "the session's disk holds " + std::to_string(data_bytes) + " bytes, more than --max-snapshot-bytes";
      }
      if (!error.empty()) {
        ::unlink(staging.c_str());
        ::rmdir(staging.substr(0, staging.rfind('/')).c_str());
        AnswerError(*shared, data_bytes > config_.max_snapshot_bytes ? ErrorCode::kTooLarge : ErrorCode::kInternal,
                    "snapshot: " + error);
        return;
      }
      snapshots_->Publish(name, base, disk_bytes, [this, shared](Result<SnapshotMeta> meta) {
        if (!meta.ok()) {
          AnswerError(*shared, meta.status().sys_errno() == EFBIG ? ErrorCode::kTooLarge : ErrorCode::kInternal,
                      "snapshot: " + meta.status().message());
          return;
        }
        msgpack::sbuffer buf;
        msgpack::packer<msgpack::sbuffer> pk(buf);
        pk.pack_map(3);
        pk.pack(std::string("name")), pk.pack(meta->name);
        pk.pack(std::string("template")), pk.pack(meta->base);
        pk.pack(std::string("bytes")), pk.pack(meta->data_bytes);
        AnswerOp(*shared, OpAnswer{std::nullopt, std::string(buf.data(), buf.size())});
      });
    };
    if (held.state == State::kRunning && held.session) {
      std::string dir = staging.substr(0, staging.rfind('/'));
      ::mkdir(dir.c_str(), 0700);
      UniqueFd dest(::open(staging.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (!dest) {
        if (errno == EEXIST) AnswerError(*shared, ErrorCode::kSessionBusy, "a snapshot of that name is being taken");
        else AnswerError(*shared, ErrorCode::kInternal, "snapshot: " + staging + ": " + std::strerror(errno));
        return;
      }
      held.session->Snapshot(std::move(dest), std::move(copied));
    } else {
      host_->MakeDisk(staging, 0, store_.Dir(held.meta.id) + "/disk.img", std::move(copied));
    }
  });
}

void Sessions::DeleteSnapshot(const Op& op) {
  auto shared = std::make_shared<Op>(op);
  snapshots_->Delete(op.req.name, [this, shared](Status s) {
    if (!s.ok()) AnswerError(*shared, ErrorCode::kInternal, "snapshot_delete: " + s.message());
    else AnswerOp(*shared, OpAnswer{std::nullopt, "\x80"});
  });
}

// ---- One-shot jobs on snapshot templates ---------------------------------------------------------

void Sessions::RunJob(JobSpec spec, const std::string& stream, const std::string& entry) {
  ++ops_in_flight_;
  auto shared = std::make_shared<JobSpec>(std::move(spec));
  bool sent = ledger_->Claim(shared->id, stream, entry, shared->retries + 1,
                             [this, shared, stream, entry](JobLedger::Verdict v, uint32_t attempt) {
    if (v == JobLedger::Verdict::kRun) {
      StartJob(shared, stream, entry, attempt);
      return;
    }
    SettleClaim(ledger_, v, stream, entry, "the daemon running this job died and no retry was left",
                [&](JobError error) {
                  ledger_->Finish(ErrorResult(shared->id, attempt, std::move(error)), stream, entry, 0,
                                  Metrics::kOtherTemplate);
                });
    OpDone();
  });
  if (!sent) {
    ledger_->Drop(stream, entry);
    --ops_in_flight_;
  }
}

void Sessions::StartJob(std::shared_ptr<JobSpec> spec, std::string stream, std::string entry, uint32_t attempt) {
  auto fail = [this, spec, stream, entry, attempt](ErrorCode code, const std::string& why) {
    ledger_->Finish(ErrorResult(spec->id, attempt, JobError{code, why}), stream, entry, 0, Metrics::kOtherTemplate);
    OpDone();
  };
  snapshots_->Ensure(spec->template_name, [this, spec, stream, entry, attempt, fail](Result<SnapshotMeta> snap) {
    int base = snap.ok() ? FindTemplate(config_, snap->base) : -1;
    if (!snap.ok() || base < 0) {
      bool unknown = !snap.ok() && snap.status().sys_errno() == ENOENT;
      fail(unknown || snap.ok() ? ErrorCode::kBadField : ErrorCode::kSandboxFailed,
           unknown ? "unknown template '" + spec->template_name + "'"
                   : snap.ok() ? "template '" + spec->template_name + "': its base " + snap->base + " is not configured here"
                               : "template '" + spec->template_name + "': " + snap.status().message());
      return;
    }
    // Its own session, never listed: made like a session's create (a warm spare of the snapshot
    // when there is one), with the job's limits.
    std::string sid = "job." + spec->id;
    if (sessions_.count(sid)) {
      fail(ErrorCode::kInternal, "a run of this job is already here");
      return;
    }
    Entry& e = sessions_[sid];
    e.internal = true;
    Op create;
    create.req.op = SessionOp::kCreate;
    create.req.session = sid;
    create.req.create.template_name = spec->template_name;
    create.req.create.memory_bytes = spec->memory_bytes;
    create.req.create.pids = spec->pids;
    create.req.create.ephemeral = true;
    e.meta.id = sid;
    e.meta.template_name = spec->template_name;
    e.meta.ephemeral = true;
    e.meta.created_ms = clock_.WallMs();
    e.last_used_ms = e.meta.created_ms;
    e.state = State::kCreating;
    e.create_started_us = clock_.MonotonicUs();
    e.waiting.push_back(std::move(create));
    e.job_start = [this, sid, spec, stream, entry, attempt, fail](bool started, const std::string& why) {
      auto it = sessions_.find(sid);
      if (!started) {
        if (it != sessions_.end()) {
          store_.Remove(sid);
          sessions_.erase(it);
        }
        fail(ErrorCode::kSandboxFailed, "could not start its sandbox: " + why);
        return;
      }
      it->second.waiting.clear();
      op_session_[spec->id] = sid;
      // The command's events (started, output, exited) are the job's, on its channel.
      it->second.session->Exec(spec->id, *spec, false, attempt,
                               [this, sid, stream, entry](JobResult&& r, uint64_t seq) {
                                 EndJob(sid, std::move(r), seq, stream, entry);
                               });
    };
    CreateOn(sid, static_cast<uint32_t>(base), snapshots_->Image(spec->template_name), snap->disk_bytes,
             snap->checksum + "@" + std::to_string(snap->created_ms));
  });
}

void Sessions::EndJob(const std::string& sid, JobResult&& r, uint64_t seq, const std::string& stream,
                      const std::string& entry) {
  op_session_.erase(r.id);
  ledger_->Finish(std::move(r), stream, entry, seq, Metrics::kOtherTemplate);
  --ops_in_flight_;
  auto it = sessions_.find(sid);
  if (it != sessions_.end()) {
    // Destroyed from the loop: this runs inside the session's command callback.
    Session* s = it->second.session.get();
    if (s != nullptr) {
      s->Defer([this, sid] {
        auto found = sessions_.find(sid);
        if (found != sessions_.end()) Destroy(found->second, std::nullopt);
      });
    } else {
      store_.Remove(sid);
      sessions_.erase(it);
    }
  }
  if (on_idle_) on_idle_();
}

}  // namespace sandpool
