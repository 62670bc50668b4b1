// The NCCL backend: built when the CUDA toolkit and NCCL are found; its tests
// skip cleanly on a machine with no GPU (like this project's CI) and run
// where a device exists.
#include <gtest/gtest.h>

#include "core/comm/nccl_communicator.h"
#include "core/comm/store.h"

namespace dst {
namespace {

TEST(Nccl, CreatesOrExplainsWhyNot) {
  TcpStoreOptions so;
  so.is_server = true;
  so.port = 0;
  so.timeout = std::chrono::seconds(5);
  Result<std::unique_ptr<Store>> store = ConnectTcpStore(so);
  ASSERT_TRUE(store.ok()) << store.status().message();
  NcclOptions o;
  o.name = "test";
  Result<std::unique_ptr<Communicator>> comm = CreateNcclCommunicator(*store.value(), o);
  if (!NcclAvailable()) {
    EXPECT_EQ(comm.status().code(), Code::kNotSupported);
    GTEST_SKIP() << "built without NCCL: " << comm.status().message();
  }
  if (!comm.ok()) {
    EXPECT_EQ(comm.status().code(), Code::kComm);
    EXPECT_NE(comm.status().message().find("CUDA device"), std::string::npos)
        << comm.status().message();
    GTEST_SKIP() << "no GPU here: " << comm.status().message();
  }
  EXPECT_EQ(comm.value()->size(), 1);
  EXPECT_TRUE(comm.value()->Barrier().ok());
}

}  // namespace
}  // namespace dst
