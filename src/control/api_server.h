// The controller's HTTP API, on loopback (and, for instances on another
// network, on the one address the job names: controller.advertise_host).
// JSON in and out.
// The whole contract, with every schema and status, is docs/openapi.yaml,
// built into the server and served at GET /api/v1/openapi.yaml.
//   GET  /api/v1/healthz                 -> {"ok":true}
//   GET  /api/v1/openapi.yaml            -> docs/openapi.yaml (application/yaml)
//   GET  /api/v1/jobs                    -> {"jobs":[{id,state,message,cost_usd,...}]}
//   GET  /api/v1/jobs/ID                 -> the job, its live and ended instances,
//                                           cost so far, progress (the "progress"
//                                           value of the job, JSON), last events
//   GET  /api/v1/jobs/ID/ledger          -> {"rows":[...],"total_usd":X}
//   GET  /api/v1/jobs/ID/decisions       -> {"decisions":[...]}
//   GET  /api/v1/jobs/ID/dashboard       -> the dashboard's data (docs/monitor.md)
//   GET  /api/v1/targets                 -> the workers' /metrics endpoints, in
//                                           Prometheus' http_sd format
//   GET  /metrics                        -> the controller's metrics (text 0.0.4)
//   GET  /jobs/ID                        -> the dashboard page; "/" redirects to
//                                           the newest job's
//   POST /api/v1/jobs/ID/cancel          -> 202 {"id":..,"state":"CANCELLED"} (the
//                                           controller stops the fleet); 409 when
//                                           the job already ended
//   POST /api/v1/jobs/ID/report          -> 200 {"ok":true}: a command workload's
//                                           progress (spottrain.report), 400 for a
//                                           body that is not a report; 409 ended
// Mutating calls need "Authorization: Bearer TOKEN" with the token from the
// token file: 401 with WWW-Authenticate: Bearer without it, 403 with a wrong
// one. Unknown job: 404; unknown path: 404; wrong method: 405. Errors are
// {"error": "..."}, also those of the HTTP layer (400 malformed request, 413
// body over 64 KiB, 414 request line too long). A job id is one path segment,
// percent-decoded after the path is split ("a%2Fb" is the job "a/b").
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "control/job_store.h"
#include "core/status.h"
#include "monitor/http_guard.h"

namespace spot::control {

// What the server shows besides the job store; an unset one answers 404.
struct ApiPages {
  std::function<std::string()> metrics;                                          // Prometheus text
  std::function<std::string()> targets;                                          // http_sd JSON
  std::function<Result<std::string>(const std::string& job_id)> dashboard_data;  // JSON
  std::function<std::string(const std::string& job_id)> dashboard_html;
};

// Takes a report's body (JSON) for a job; InvalidArgument becomes 400.
using ReportHandler = std::function<Status(const std::string& job_id, const std::string& body)>;

struct ApiOptions {
  std::string host = "127.0.0.1";  // refused unless a loopback address, or:
  // Allows `host` to be one address of this machine on a network (the
  // controller's advertise_host, where instances elsewhere send reports);
  // a wildcard ("0.0.0.0", "::", "") is refused all the same. Mutations
  // need the token there as on loopback.
  bool reachable_from_network = false;
  int port = 0;  // 0: any free port
  // Created with 32 random bytes as 64 hex digits, mode 0600, when absent;
  // read when present (so a restarted controller keeps its token).
  std::string token_path;
  ApiPages pages;
  ReportHandler report;  // unset: reports are answered 503
  // Connection cap and timeouts against slow or idle clients (monitor/http_guard.h):
  // healthz answers while others hold connections.
  monitor::HttpGuardOptions http;
};

class ApiServer {
 public:
  // `cancel` is called (from a server thread) for an authorized cancel of a
  // job that exists and has not ended; its error becomes the response.
  static Result<std::unique_ptr<ApiServer>> Start(JobStore* store, const ApiOptions& options,
                                                  std::function<Status(const std::string&)> cancel);
  virtual ~ApiServer() = default;
  virtual int port() const = 0;
  virtual std::string url() const = 0;  // "http://HOST:PORT"
  virtual const std::string& token() const = 0;
};

// Reads the token file, creating it (0600, atomically) when absent.
Result<std::string> LoadOrCreateToken(const std::string& path);

}  // namespace spot::control
