// The dashboard's files, embedded into the library at build time
// (dashboard/embed.cmake generates the definition from dashboard/ and the npm
// packages it uses), so the HTTP server never reads the file system.
#pragma once

#include <string_view>

namespace dst::metrics {

struct DashboardAsset {
  std::string_view path;          // as requested, e.g. "/index.html", "/assets/app.js"
  std::string_view content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view body;
};

// The asset served at `path` ("/" is "/index.html"), or null when there is none.
const DashboardAsset *FindDashboardAsset(std::string_view path);

}  // namespace dst::metrics
