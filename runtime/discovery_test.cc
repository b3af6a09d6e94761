#include "naarpc/discovery.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace naarpc {
namespace {

TEST(ParseNaaSpec, EntriesWithDefaultsAndIpv6) {
  auto r = ParseNaaSpec("10.0.0.5:4000:1:3,fpga-2::2:1,[fe80::1%eth0]:12346:127:255");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].address, "10.0.0.5");
  EXPECT_EQ((*r)[0].port, 4000);
  EXPECT_EQ((*r)[0].function_code, 1);
  EXPECT_EQ((*r)[0].param_count, 3u);
  EXPECT_EQ((*r)[1].address, "fpga-2");
  EXPECT_EQ((*r)[1].port, kDefaultNaaPort);  // empty port
  EXPECT_EQ((*r)[1].function_code, 2);
  EXPECT_EQ((*r)[2].address, "fe80::1%eth0");
  EXPECT_EQ((*r)[2].port, 12346);
  EXPECT_EQ((*r)[2].function_code, 127);
  EXPECT_EQ((*r)[2].param_count, 255u);
}

TEST(ParseNaaSpec, SeveralNaasServeOneFunctionCode) {
  auto r = ParseNaaSpec("n1:4000:1:3,n2:4000:1:3,n1:4001:1:3,n1:4000:2:1");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[1].address, "n2");
  EXPECT_EQ((*r)[2].port, 4001);
  EXPECT_EQ((*r)[3].function_code, 2);
}

TEST(ParseNaaSpec, MalformedEntriesNameTheEntryAndTheField) {
  struct Case {
    const char* spec;
    const char* says;
  };
  for (const Case& c : {
           Case{"", "entry 1 is empty"},
           Case{"h:1:2:3,", "entry 2 is empty"},
           Case{"h:1:2", "entry 1 'h:1:2': expected <address>:<port>:<fncode>:<param_count>"},
           Case{"justahost", "entry 1 'justahost': expected"},
           Case{":1:2:3", "entry 1 ':1:2:3': address is empty"},
           Case{"h:x:2:3", "port 'x' is not 1..65535"},
           Case{"h:70000:2:3", "port '70000' is not 1..65535"},
           Case{"h:0:2:3", "port '0' is not 1..65535"},
           Case{"h:1:0:3", "function code '0' is not 1..127"},
           Case{"h:1:128:3", "function code '128' is not 1..127"},
           Case{"h:1:-1:3", "function code '-1'"},
           Case{"h:1:2:", "parameter count '' is not 1..255"},
           Case{"h:1:2:256", "parameter count '256'"},
           Case{"h:1:2:3:4", "more than 4 fields"},
           Case{"fe80::1:1:2:3", "more than 4 fields (an IPv6 address needs brackets)"},
           Case{"[fe80::1:1:2:3", "'[' without ']'"},
           Case{"[fe80::1]1:2:3", "expected ':' after the bracketed address"},
           Case{"a:1:5:1,a:1:5:1", "entry 2 'a:1:5:1': function code 5 is named twice for 'a:1'"},
           Case{"a:1:5:1,b:2:5:2", "entry 2 'b:2:5:2': function code 5 has parameter count 2 here and 1 in an entry before"},
       }) {
    auto r = ParseNaaSpec(c.spec);
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.spec;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.spec << " -> " << r.status().ToString();
  }
}

TEST(DiscoverNaa, ReadsTheEnvironment) {
  unsetenv("NAA_SPEC");
  unsetenv("NAA_LOCAL_IP");
  EXPECT_EQ(DiscoverNaa().status().code(), StatusCode::kNotFound);
  setenv("NAA_SPEC", "127.0.0.1::3:2,127.0.0.1:9000:4:1", 1);
  auto d = DiscoverNaa();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->local_ip.has_value());
  auto e = d->Find(4);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, 9000);
  auto missing = d->Find(5);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("it names 3, 4"), std::string::npos)
      << missing.status().ToString();
  setenv("NAA_LOCAL_IP", "10.1.2.3", 1);
  d = DiscoverNaa();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->local_ip, "10.1.2.3");
  setenv("NAA_SPEC", "h:1:0:1", 1);
  EXPECT_EQ(DiscoverNaa().status().code(), StatusCode::kInvalidArgument);
  unsetenv("NAA_SPEC");
  unsetenv("NAA_LOCAL_IP");
}

}  // namespace
}  // namespace naarpc
