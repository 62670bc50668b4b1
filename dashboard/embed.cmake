# Embeds the dashboard (this directory) into the library.
#
# Every page file here (index.html at "/index.html", everything else at
# "/assets/<path relative to dashboard/>") plus uPlot from npm
# (node_modules/uplot/dist/uPlot.iife.min.js and uPlot.min.css, at
# "/assets/uPlot.iife.min.js" and "/assets/uPlot.min.css") is turned by
# tools/embed_assets.py into one generated C++ source that defines
# dst::metrics::FindDashboardAsset (metrics/dashboard_assets.h). The source is
# regenerated whenever a dashboard file or the generator changes; new files are
# picked up on the next build (CONFIGURE_DEPENDS).
#
# Sets DSTRAIN_DASHBOARD_SOURCES (the generated .cc) for dstrain_core.
# Not embedded: dev/ (the mock server), grafana/, tools/, node_modules/,
# package*.json and this file.

set(_dash_dir ${CMAKE_CURRENT_LIST_DIR})
set(_dash_uplot_dir ${_dash_dir}/node_modules/uplot/dist)

if(NOT EXISTS ${_dash_uplot_dir}/uPlot.iife.min.js OR NOT EXISTS ${_dash_uplot_dir}/uPlot.min.css)
  message(FATAL_ERROR
    "dstrain: the dashboard's npm packages are missing (${_dash_uplot_dir}/uPlot.iife.min.js).\n"
    "Run `bash scripts/install-deps.sh` (or `npm ci --prefix dashboard`) and configure again.")
endif()

find_program(DSTRAIN_PYTHON3 NAMES python3 PATHS /usr/bin NO_CACHE)
if(NOT DSTRAIN_PYTHON3)
  message(FATAL_ERROR "dstrain: python3 is needed to embed the dashboard (dashboard/tools/embed_assets.py).")
endif()

file(GLOB_RECURSE _dash_files CONFIGURE_DEPENDS RELATIVE ${_dash_dir}
  ${_dash_dir}/*.html ${_dash_dir}/*.js ${_dash_dir}/*.mjs ${_dash_dir}/*.css
  ${_dash_dir}/*.svg ${_dash_dir}/*.png ${_dash_dir}/*.ico ${_dash_dir}/*.json)
list(FILTER _dash_files EXCLUDE REGEX "^(node_modules|dev|grafana|tools)/")
list(FILTER _dash_files EXCLUDE REGEX "^package(-lock)?\\.json$")
list(SORT _dash_files)

set(_dash_args)
set(_dash_deps ${_dash_dir}/tools/embed_assets.py)
foreach(_f IN LISTS _dash_files)
  if(_f STREQUAL "index.html")
    list(APPEND _dash_args "/index.html=${_dash_dir}/${_f}")
  else()
    list(APPEND _dash_args "/assets/${_f}=${_dash_dir}/${_f}")
  endif()
  list(APPEND _dash_deps ${_dash_dir}/${_f})
endforeach()
foreach(_f uPlot.iife.min.js uPlot.min.css)
  list(APPEND _dash_args "/assets/${_f}=${_dash_uplot_dir}/${_f}")
  list(APPEND _dash_deps ${_dash_uplot_dir}/${_f})
endforeach()

set(_dash_out ${CMAKE_BINARY_DIR}/generated/dashboard_assets.cc)
add_custom_command(
  OUTPUT ${_dash_out}
  COMMAND ${DSTRAIN_PYTHON3} ${_dash_dir}/tools/embed_assets.py ${_dash_out} ${_dash_args}
  DEPENDS ${_dash_deps}
  COMMENT "Embedding the dashboard (${_dash_out})"
  VERBATIM)

set(DSTRAIN_DASHBOARD_SOURCES ${_dash_out})
