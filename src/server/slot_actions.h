#pragma once
// POST /slots/{id}?action=save|restore|erase (llama-server's slot actions): a slot's prompt cache
// written to and read from --slot-save-path (runtime/slot_file.h), or dropped. Runs on the
// scheduler's engine thread between passes (Scheduler::run_on_engine). Without --slot-save-path
// every action answers 501.
#include "server/api_host.h"

namespace strata::server {

void add_slot_action_routes(ApiHost& host);

}  // namespace strata::server
