// KV links and transfers (sim/kv_transfer.h): the named links carry their datasheet
// bandwidths, a transfer takes latency + bytes over the NICs that carry it in parallel, a
// layer-wise stream exposes what the link could not carry during the prefill (at least the
// last layer's share), and transfers from one replica queue first come first served on its NIC.
#include <gtest/gtest.h>

#include "hwmodel/base/error.h"
#include "sim/kv_transfer.h"
#include "test_support.h"

namespace batchsim {
namespace {

TEST(KvLink, NamedLinksCarryTheirDatasheetBandwidths) {
  EXPECT_DOUBLE_EQ(resolve_kv_link("ib").bytes_per_s(), 50e9);       // ConnectX-7 400 Gb/s
  EXPECT_DOUBLE_EQ(resolve_kv_link("nvlink").bytes_per_s(), 450e9);  // NVLink 4, one direction
  EXPECT_DOUBLE_EQ(resolve_kv_link("roce").bytes_per_s(), 25e9);
  EXPECT_DOUBLE_EQ(resolve_kv_link("pcie").bytes_per_s(), 32e9);
  const KvLink custom = resolve_kv_link("ib", 100.0, 3.0);
  EXPECT_DOUBLE_EQ(custom.bytes_per_s(), 12.5e9);
  EXPECT_DOUBLE_EQ(custom.latency_us, 3.0);
}

TEST(KvLink, BadBandwidthsAndNamesAreRefusedByOption) {
  using testing::user_error_of;
  EXPECT_NE(user_error_of([] { resolve_kv_link("ib", 0.0); }).find("--kv-link-gbps 0"), std::string::npos);
  EXPECT_NE(user_error_of([] { resolve_kv_link("ib", -400.0); }).find("--kv-link-gbps -400"), std::string::npos);
  EXPECT_NE(user_error_of([] { resolve_kv_link("ib", std::nullopt, -1.0); }).find("--kv-link-latency-us"),
            std::string::npos);
  const std::string unknown = user_error_of([] { resolve_kv_link("ethernet"); });
  EXPECT_NE(unknown.find("--kv-link 'ethernet'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("nvlink, ib, roce, pcie"), std::string::npos) << unknown;
  EXPECT_NE(user_error_of([] { parse_kv_transfer_mode("push"); }).find("--kv-transfer 'push'"), std::string::npos);
}

TEST(KvTransfer, TimeIsLatencyPlusBytesOverTheParallelNics) {
  const KvLink ib = resolve_kv_link("ib");  // 50 GB/s per GPU, 10 us
  // Llama-2-7B's 2,048-token prompt: 2048 x 512 KiB = 1 GiB.
  const double bytes = 2048.0 * 524288;
  EXPECT_DOUBLE_EQ(kv_transfer_seconds(ib, bytes, 1), 10e-6 + bytes / 50e9);
  EXPECT_DOUBLE_EQ(kv_transfer_seconds(ib, bytes, 4), 10e-6 + bytes / 200e9);
}

TEST(KvTransfer, LayerwiseExposesWhatTheLinkCouldNotCarryDuringThePrefill) {
  // 32 layers of 1 MB: a link that keeps up leaves one layer's share.
  EXPECT_DOUBLE_EQ(layerwise_exposed_bytes(32e6, 32, 1e9, 1.0), 1e6);
  // A link carrying 10 MB while the prefill ran leaves the other 22 MB.
  EXPECT_DOUBLE_EQ(layerwise_exposed_bytes(32e6, 32, 1e9, 0.010), 22e6);
  // No overlap at all: everything.
  EXPECT_DOUBLE_EQ(layerwise_exposed_bytes(32e6, 32, 1e9, 0.0), 32e6);
}

TEST(KvLinkSchedule, TransfersQueueOnEitherNicFirstComeFirstServed) {
  KvLinkSchedule s(4);
  const auto ms = [](double v) { return SimTime::from_seconds(v * 1e-3); };
  // Replica 0 sends to 2 and then to 3: the second waits for 0's NIC.
  const auto a = s.reserve(0, 2, ms(0), ms(5));
  const auto b = s.reserve(0, 3, ms(1), ms(5));
  EXPECT_EQ(a.start, ms(0));
  EXPECT_EQ(b.start, ms(5));
  EXPECT_EQ(b.end, ms(10));
  // Replica 1 sends to 2, whose NIC is free again at 5 ms.
  const auto c = s.reserve(1, 2, ms(2), ms(1));
  EXPECT_EQ(c.start, ms(5));
  // Replica 1 to 3: 3 is busy until 10 ms.
  const auto d = s.reserve(1, 3, ms(6), ms(1));
  EXPECT_EQ(d.start, ms(10));
  // An idle pair starts at once.
  KvLinkSchedule idle(2);
  EXPECT_EQ(idle.reserve(0, 1, ms(3), ms(2)).start, ms(3));
}

}  // namespace
}  // namespace batchsim
