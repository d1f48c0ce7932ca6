#pragma once
// The web page at `/` (chat + the expert tier's live panel): plain HTML/JS/CSS from
// src/server/webui/, embedded into the binary at build time (webui/embed.cmake writes the
// byte arrays); nothing is fetched from the network. `strata serve --no-webui` leaves it out.
#include <httplib.h>

#include <cstddef>
#include <string_view>

namespace strata::server {

struct EmbeddedFile {
  const char* name;  // file name in src/server/webui/
  const unsigned char* data;
  size_t size;
};
extern const EmbeddedFile kWebuiFiles[];  // generated
extern const size_t kWebuiFileCount;

// nullptr when there is no such file.
const EmbeddedFile* webui_file(std::string_view name);

// GET / (index.html) and GET /webui/<file>. Static files: no API key needed (the page asks for
// one and sends it with its requests).
void add_webui_routes(httplib::Server& http);

}  // namespace strata::server
