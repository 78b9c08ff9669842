// The SpotMonitor dashboard: one self-contained HTML page that charts a job's
// fleet, spot market, progress, cost, epochs, worker utilization and training
// curves. The page's CSS and JavaScript (uPlot and ours, from web/) are
// embedded into the binary at build time and inlined into the document, so it
// loads nothing from outside: it works offline and from a file:// URL.
//
// The data it renders is one JSON document produced by the controller (the
// schema, version 1, is described at the top of web/src/dashboard.js). Times
// are simulated seconds since the job's start; the page shows simulated hours.
#pragma once

#include <string>

namespace spot::monitor {

struct DashboardPage {
  // The document's <title> and the name shown while no data has loaded, e.g.
  // "fashion-mnist-spot · SpotTrain". Plain text; escaped for HTML.
  std::string title;
  // Live mode: the page fetches this URL (relative, e.g.
  // "/api/v1/jobs/ID/dashboard") on load and then every `poll_ms` while the
  // data it returns says "live": true. Empty: snapshot mode.
  std::string data_url;
  // Snapshot mode (e.g. `spot report`): the dashboard JSON, inlined into the
  // page and rendered once, without any fetch. Used when data_url is empty.
  // Must be a JSON document; it is escaped so that it cannot end its <script>.
  std::string snapshot_json;
  // Polling interval in milliseconds; values below 50 are raised to 50.
  int poll_ms = 1000;
};

// Returns the page as one HTML document: CSS and JS inlined, no external
// references (the only URL in it is `data_url`). Thread-safe.
std::string DashboardHtml(const DashboardPage& page);

}  // namespace spot::monitor
