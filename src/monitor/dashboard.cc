#include "monitor/dashboard.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <utility>

namespace spot::monitor {
namespace internal {
// Defined in the source that cmake/SpotWeb.cmake generates from web/: the
// bytes of the embedded file with this base name, or "" when there is none.
std::string_view DashboardAsset(std::string_view name);
}  // namespace internal

namespace {

constexpr int kMinPollMs = 50;
constexpr std::string_view kTemplate = "dashboard.html";
// Inlined in this order: the libraries first, then ours (later files use the
// names earlier ones define).
constexpr std::string_view kStyles[] = {"uPlot.min.css", "dashboard.css"};
constexpr std::string_view kScripts[] = {"uPlot.iife.min.js", "common.js", "charts.js", "panels.js",
                                         "dashboard.js"};

std::string EscapeHtml(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON text for a <script type="application/json"> element. In JSON a '<' can
// only stand inside a string, where \u003c means the same character, so the
// text can hold neither "</script" nor "<!--" and stays parseable.
std::string EscapeJsonForScript(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

// For the inlined CSS and JS: "</style" or "</script" may only appear inside a
// string, regular expression or comment of theirs, where "<\/" means the same.
std::string EscapeRawText(std::string_view text, std::string_view tag) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] != '<' || i + 2 + tag.size() > text.size() || text[i + 1] != '/') continue;
    std::string_view next = text.substr(i + 2, tag.size());
    bool match = std::equal(next.begin(), next.end(), tag.begin(), [](char a, char b) {
      return std::tolower(static_cast<unsigned char>(a)) == b;
    });
    if (match) out += '\\';
  }
  return out;
}

std::string Inline(std::span<const std::string_view> names, std::string_view tag) {
  std::string out;
  for (std::string_view name : names) {
    out += "<";
    out += tag;
    out += ">/* ";
    out += name;
    out += " */\n";
    out += EscapeRawText(internal::DashboardAsset(name), tag);
    out += "\n</";
    out += tag;
    out += ">\n";
  }
  return out;
}

// Replaces each "{{NAME}}" of the template with its value, in one pass, so a
// value that happens to contain "{{" is never expanded again.
std::string FillTemplate(std::string_view tmpl,
                         std::initializer_list<std::pair<std::string_view, std::string>> values) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t open = tmpl.find("{{", pos);
    size_t close = open == std::string_view::npos ? open : tmpl.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    std::string_view key = tmpl.substr(open + 2, close - open - 2);
    auto it =
        std::find_if(values.begin(), values.end(), [&](const auto& kv) { return kv.first == key; });
    out += tmpl.substr(pos, open - pos);
    if (it != values.end()) out += it->second;
    pos = close + 2;
  }
  out += tmpl.substr(pos);
  return out;
}

}  // namespace

std::string DashboardHtml(const DashboardPage& page) {
  nlohmann::json config = {{"title", page.title},
                           {"data_url", page.data_url},
                           {"poll_ms", std::max(page.poll_ms, kMinPollMs)}};
  std::string config_text = config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string snapshot = page.data_url.empty() ? page.snapshot_json : "null";
  if (snapshot.empty()) snapshot = "null";
  return FillTemplate(internal::DashboardAsset(kTemplate),
                      {{"TITLE", EscapeHtml(page.title)},
                       {"STYLES", Inline(kStyles, "style")},
                       {"CONFIG", EscapeJsonForScript(config_text)},
                       {"SNAPSHOT", EscapeJsonForScript(snapshot)},
                       {"SCRIPTS", Inline(kScripts, "script")}});
}

}  // namespace spot::monitor
