#include "server/webui.h"

#include <string>

namespace strata::server {

namespace {

const char* content_type(std::string_view name) {
  auto ends = [&](std::string_view ext) { return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext; };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

void send_file(httplib::Response& res, const EmbeddedFile& f) {
  res.set_header("Cache-Control", "no-cache");
  res.set_content(reinterpret_cast<const char*>(f.data), f.size, content_type(f.name));
}

}  // namespace

const EmbeddedFile* webui_file(std::string_view name) {
  for (size_t i = 0; i < kWebuiFileCount; ++i)
    if (name == kWebuiFiles[i].name) return &kWebuiFiles[i];
  return nullptr;
}

void add_webui_routes(httplib::Server& http) {
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    if (const EmbeddedFile* f = webui_file("index.html")) send_file(res, *f);
    else res.status = 404;
  });
  http.Get(R"(/webui/([A-Za-z0-9_.-]+))", [](const httplib::Request& req, httplib::Response& res) {
    if (const EmbeddedFile* f = webui_file(req.matches[1].str())) send_file(res, *f);
    else res.status = 404;  // the error handler writes the error object
  });
}

}  // namespace strata::server
