// Includes Debian's cpp-httplib as its shared library was built (pkg-config
// cpp-httplib: OpenSSL, zlib and Brotli on), so the classes' layout matches
// libcpp-httplib.so. Include this, never <httplib.h> directly.
#ifndef NAARPC_RUNTIME_HTTPLIB_CONFIG_H_
#define NAARPC_RUNTIME_HTTPLIB_CONFIG_H_

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>

#endif  // NAARPC_RUNTIME_HTTPLIB_CONFIG_H_
