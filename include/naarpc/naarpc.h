// naarpc's public API in one include: client sessions, the software-NAA
// server, transports, status, deadlines, NAA_SPEC discovery, statistics,
// interceptors, the metrics endpoint and logging. Generated
// stubs include what they need themselves ("<package>/<name>.naa.h").
#ifndef NAARPC_NAARPC_H_
#define NAARPC_NAARPC_H_

#include "naarpc/call_stats.h"
#include "naarpc/channel.h"
#include "naarpc/client_session.h"
#include "naarpc/comm_state.h"
#include "naarpc/deadline.h"
#include "naarpc/discovery.h"
#include "naarpc/histogram.h"
#include "naarpc/interceptor.h"
#include "naarpc/log.h"
#include "naarpc/logging_interceptor.h"
#include "naarpc/metrics_server.h"
#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "naarpc/region_layout.h"
#include "naarpc/stats_registry.h"
#include "naarpc/status.h"
#include "naarpc/stream.h"
#include "naarpc/strided_view.h"
#include "naarpc/transport.h"
#include "naarpc/transport_factory.h"
#include "naarpc/user_memory.h"

#endif  // NAARPC_NAARPC_H_
