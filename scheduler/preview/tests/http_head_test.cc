#include "scheduler/preview/http_head.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

TEST(HttpHead, ParsesAStrictRequestHead) {
  auto h = ParseHttpHead("GET /tok/a?b=1 HTTP/1.1\r\nHost: example:8480\r\nX-Thing:  spaced  \r\n\r\n");
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->method, "GET");
  EXPECT_EQ(h->target, "/tok/a?b=1");
  EXPECT_EQ(*h->Find("host"), "example:8480");
  EXPECT_EQ(*h->Find("x-thing"), "spaced");
  EXPECT_EQ(h->Find("missing"), nullptr);
}

TEST(HttpHead, RefusesWhatCouldSmuggleOrConfuse) {
  for (const char* bad : {
           "GET /a HTTP/1.1\r\nHost: a\r\n",                                     // not complete
           "GET /a HTTP/2\r\n\r\n",                                               // not 1.x
           "GET a HTTP/1.1\r\n\r\n",                                              // target not a path
           "GE(T /a HTTP/1.1\r\n\r\n",                                            // method
           "GET /a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",                       // two Hosts
           "GET /a HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
           "GET /a HTTP/1.1\r\nBad Name: x\r\n\r\n",
           "GET /a HTTP/1.1\r\n folded\r\n\r\n",                                  // obs-fold
           "GET /a b HTTP/1.1\r\n\r\n",                                           // space in target
       }) {
    EXPECT_FALSE(ParseHttpHead(bad).ok()) << bad;
  }
}

TEST(HttpHead, SplitsTheTokenOffTheTarget) {
  EXPECT_EQ(SplitPreviewTarget("/abc123/x/y?q"), std::make_pair(std::string("abc123"), std::string("/x/y?q")));
  EXPECT_EQ(SplitPreviewTarget("/abc123"), std::make_pair(std::string("abc123"), std::string("/")));
  EXPECT_EQ(SplitPreviewTarget("/abc123?q=1"), std::make_pair(std::string("abc123"), std::string("/?q=1")));
  EXPECT_FALSE(SplitPreviewTarget("/"));
  EXPECT_FALSE(SplitPreviewTarget("/ABC/"));
  EXPECT_FALSE(SplitPreviewTarget("//x"));
  EXPECT_FALSE(SplitPreviewTarget("/" + std::string(65, 'a')));
}

TEST(HttpHead, RewritesForTheSandboxesServer) {
  auto h = ParseHttpHead("GET /tok/app HTTP/1.1\r\nHost: preview:8480\r\nConnection: keep-alive\r\n"
                         "X-Forwarded-For: 6.6.6.6\r\nAccept: */*\r\n\r\n");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(RewriteHttpHead(*h, "/app", 3000, "192.0.2.9", "/tok"),
            "GET /app HTTP/1.1\r\nHost: localhost:3000\r\nAccept: */*\r\nX-Forwarded-Host: preview:8480\r\n"
            "X-Forwarded-For: 192.0.2.9\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Prefix: /tok\r\nConnection: close\r\n\r\n");
  auto ws = ParseHttpHead("GET /tok/ws HTTP/1.1\r\nHost: p\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n");
  ASSERT_TRUE(ws.ok());
  std::string out = RewriteHttpHead(*ws, "/ws", 5173, "::1", "/tok");
  EXPECT_NE(out.find("Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace sandpool
