// SessionStore on a real directory: what is saved loads back whole, and what is incomplete,
// foreign or a spare of an earlier run is removed, never followed.
#include "scheduler/sessions/session_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace sandpool {
namespace {

namespace fs = std::filesystem;

class SessionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = fs::temp_directory_path().string() + "/sp_store_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    state_ = dir_ + "/state";
    TemplateConfig t;
    t.name = "default";
    config_.templates.push_back(t);
    TemplateConfig py;
    py.name = "python";
    config_.templates.push_back(py);
  }
  void TearDown() override { fs::remove_all(dir_); }

  SessionMeta Meta(const std::string& id) {
    SessionMeta m;
    m.id = id;
    m.template_name = "python";
    m.base = "python";
    m.env = {{"A", "1"}};
    m.labels = {{"team", "x"}};
    m.memory_bytes = 256 << 20;
    m.pids = 64;
    m.disk_bytes = 1 << 30;
    m.cpus = 1.5;
    m.idle_timeout_ms = 60000;
    m.created_ms = 1234;
    return m;
  }
  // A session as Sessions makes one: directory, meta, disk image.
  void Make(const SessionStore& store, const SessionMeta& m) {
    ASSERT_EQ(::mkdir(store.Dir(m.id).c_str(), 0700), 0);
    ASSERT_TRUE(store.Save(m).ok());
    std::ofstream(store.Dir(m.id) + "/disk.img") << "img";
  }

  std::string dir_, state_;
  DaemonConfig config_;
};

TEST_F(SessionStoreTest, SavedSessionsLoadBackWhole) {
  SessionStore store(state_);
  ASSERT_TRUE(store.Init().ok());
  SessionMeta a = Meta("a1");
  a.SetEgress(EgressRequest{std::vector<std::string>{"example.com:443"}, {"10.0.0.0/8"}});
  SessionMeta b = Meta("b2");
  b.SetEgress(EgressRequest{std::nullopt, {}});
  Make(store, a);
  Make(store, b);
  auto loaded = store.LoadAll(config_);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].id, "a1");
  EXPECT_EQ(loaded[0].env, a.env);
  EXPECT_EQ(loaded[0].labels, a.labels);
  EXPECT_EQ(loaded[0].memory_bytes, a.memory_bytes);
  EXPECT_EQ(loaded[0].cpus, a.cpus);
  EXPECT_EQ(loaded[0].Egress(), a.Egress());
  ASSERT_TRUE(loaded[1].Egress().has_value());
  EXPECT_FALSE(loaded[1].Egress()->allow.has_value()) << "no allow list is not an empty one";
}

TEST_F(SessionStoreTest, IncompleteUnknownAndSpareDirectoriesAreRemoved) {
  SessionStore store(state_);
  ASSERT_TRUE(store.Init().ok());
  Make(store, Meta("keep"));
  // No disk image.
  SessionMeta nodisk = Meta("nodisk");
  ASSERT_EQ(::mkdir(store.Dir("nodisk").c_str(), 0700), 0);
  ASSERT_TRUE(store.Save(nodisk).ok());
  // A meta naming another session.
  SessionMeta other = Meta("other");
  Make(store, other);
  fs::rename(store.Dir("other"), store.Dir("wrongname"));
  // A template not configured here.
  SessionMeta gone = Meta("gone");
  gone.template_name = gone.base = "ruby";
  Make(store, gone);
  // A spare of an earlier run.
  std::string spare = store.SpareDir(7);
  ASSERT_EQ(::mkdir(spare.c_str(), 0700), 0);
  std::ofstream(spare + "/disk.img") << "img";

  auto loaded = store.LoadAll(config_);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].id, "keep");
  for (const char* d : {"s-nodisk", "s-wrongname", "s-gone", "w-7"}) {
    EXPECT_FALSE(fs::exists(state_ + "/sessions/" + d)) << d;
  }
}

TEST_F(SessionStoreTest, AMetaFileThatIsASymlinkIsNotFollowed) {
  SessionStore store(state_);
  ASSERT_TRUE(store.Init().ok());
  SessionMeta m = Meta("link");
  Make(store, m);
  // The real meta moved elsewhere, a symlink in its place: the session does not load.
  std::string elsewhere = dir_ + "/elsewhere";
  fs::rename(store.Dir("link") + "/meta", elsewhere);
  fs::create_symlink(elsewhere, store.Dir("link") + "/meta");
  EXPECT_TRUE(store.LoadAll(config_).empty());
  EXPECT_TRUE(fs::exists(elsewhere)) << "the target of a symlink is never touched";
}

TEST_F(SessionStoreTest, AFileWithoutBaseTakesItsTemplateAsBase) {
  SessionStore store(state_);
  ASSERT_TRUE(store.Init().ok());
  SessionMeta m = Meta("old");
  m.base.clear();  // written by a daemon from before `base`
  Make(store, m);
  auto loaded = store.LoadAll(config_);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].base, "python");
}

}  // namespace
}  // namespace sandpool
