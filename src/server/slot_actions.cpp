#include "server/slot_actions.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "runtime/slot_file.h"

namespace strata::server {

namespace {

using nlohmann::json;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int slot_id(const std::string& s, int n_slots) {
  if (s.empty() || s.size() > 9) throw bad_request(fmt::format("no slot '{}' (this server has slots 0..{})", s, n_slots - 1), "id_slot", "invalid_slot");
  const int id = std::stoi(s);  // the route's pattern holds digits only
  if (id >= n_slots) throw bad_request(fmt::format("no slot {} (this server has slots 0..{})", id, n_slots - 1), "id_slot", "invalid_slot");
  return id;
}

std::string filename_of(const httplib::Request& req) {
  const Json body = parse_body(req.body);
  const Json* f = field(body, "filename");
  if (!f) throw bad_request("the request body needs \"filename\" (a file name inside --slot-save-path)", "filename", "missing_filename");
  if (!f->is_string()) throw wrong_type("filename", "a string");
  return f->get<std::string>();
}

// Runs one action on the engine thread; a slot holding a request is a 409, a file or name the
// engine cannot take a 400 naming why.
json run_action(Scheduler& sched, int id, const std::function<json(Engine&)>& fn) {
  json out;
  std::future<void> done = sched.run_on_engine([&](Engine& eng) {
    if (sched.slot_busy(id)) throw ApiError(409, fmt::format("slot {} is busy with a request; try again when it is idle", id), "invalid_request_error", "id_slot", "slot_busy");
    out = fn(eng);
  });
  try {
    done.get();
  } catch (const SlotFileError& e) {
    throw bad_request(e.what(), "filename", "invalid_slot_file");
  }
  return out;
}

void handle(ApiHost& host, SlotDir* dir, const httplib::Request& req, httplib::Response& res) {
  if (!dir)
    throw ApiError(501, "This server does not support slots action: start it with --slot-save-path DIR", "not_supported_error", "", "slots_not_supported");
  host.require_ready();
  Scheduler& sched = *host.core().sched;
  const int id = slot_id(req.matches[1], sched.n_slots());
  const std::string action = req.get_param_value("action");
  json out;
  if (action == "save") {
    const std::string name = filename_of(req);
    out = run_action(sched, id, [&](Engine& eng) {
      const auto t0 = std::chrono::steady_clock::now();
      const SlotFileCounts c = dir->save(eng, id, name);
      return json{{"id_slot", id}, {"filename", name}, {"n_saved", c.n_tokens}, {"n_written", c.bytes}, {"timings", {{"save_ms", ms_since(t0)}}}};
    });
  } else if (action == "restore") {
    const std::string name = filename_of(req);
    out = run_action(sched, id, [&](Engine& eng) {
      const auto t0 = std::chrono::steady_clock::now();
      const SlotFileCounts c = dir->restore(eng, id, name);
      return json{{"id_slot", id}, {"filename", name}, {"n_restored", c.n_tokens}, {"n_read", c.bytes}, {"timings", {{"restore_ms", ms_since(t0)}}}};
    });
  } else if (action == "erase") {
    out = run_action(sched, id, [&](Engine& eng) {
      const int n = eng.seq_length(id);
      eng.reset(id);
      return json{{"id_slot", id}, {"n_erased", n}};
    });
  } else {
    throw bad_request(fmt::format("unknown slot action '{}' (save, restore or erase)", action), "action", "invalid_action");
  }
  res.set_content(dump(out), "application/json");
}

}  // namespace

void add_slot_action_routes(ApiHost& host) {
  const std::string& path = host.options().slot_save_path;
  std::shared_ptr<SlotDir> dir = path.empty() ? nullptr : std::make_shared<SlotDir>(path);  // throws at start-up when unusable
  host.http().Post(R"(/slots/(\d+))", host.guarded([&host, dir](const httplib::Request& req, httplib::Response& res) { handle(host, dir.get(), req, res); },
                                                  ErrorShape::OpenAI));
}

}  // namespace strata::server
