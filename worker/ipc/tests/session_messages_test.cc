#include "worker/ipc/session_messages.h"

#include <gtest/gtest.h>

#include <string>

namespace sandpool {
namespace {

// The head the scheduler sends before a file operation's request is exactly what EncodeMsg puts
// before it, at every length msgpack encodes differently (fixstr, str8, str16, str32), and the
// agent's view of the message is the request itself.
TEST(SessionMessages, AFileOperationsHeadAndRequestAreTheEncodedMessage) {
  for (size_t len : {size_t{0}, size_t{31}, size_t{32}, size_t{255}, size_t{256}, size_t{65535}, size_t{65536},
                     size_t{1} << 20}) {
    std::string request(len, '\0');
    for (size_t i = 0; i < len; ++i) request[i] = static_cast<char>(i % 251);
    for (uint64_t req : {uint64_t{1}, uint64_t{200}, uint64_t{1} << 40}) {
      std::string whole = EncodeMsg(AgentFileMsg{req, request});
      EXPECT_EQ(EncodeMsgHead(AgentFileMsg{req, {}}, len) + request, whole) << len << " bytes, req " << req;
      AgentFileView view;
      ASSERT_TRUE(DecodeMsg(whole, &view).ok());
      EXPECT_EQ(view.req, req);
      EXPECT_EQ(view.request, request);
      // A view into the input, not a copy.
      if (len > 0) {
        EXPECT_GE(view.request.data(), whole.data());
        EXPECT_LE(view.request.data() + view.request.size(), whole.data() + whole.size());
      }
    }
  }
}

// The agent's reply goes out as a head and the value's buffer: together, EncodeMsg's message.
TEST(SessionMessages, AReplysHeadAndValueAreTheEncodedMessage) {
  for (size_t len : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{65535}, size_t{65536}, size_t{3} << 20}) {
    AgentReplyMsg r;
    r.req = 77;
    r.value.assign(len, '\x81');
    for (const char* error : {"", "not_found"}) {
      r.error = error;
      r.message = *error ? "no such file: /work/x" : "";
      AgentReplyMsg without = r;
      without.value.clear();
      EXPECT_EQ(EncodeMsgHead(without, len) + r.value, EncodeMsg(r)) << len << " bytes, error '" << error << "'";
    }
  }
}

}  // namespace
}  // namespace sandpool
