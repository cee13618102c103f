// One rule for every job's --resume (docs/reliability.md, "Resume"): the
// hyper-parameters a checkpoint was trained with must equal this run's, or
// the run is refused naming the first that differs; --override NAME[,NAME]
// (or a bare --override: any) accepts the change, and the job records it in
// the run's config (kiln.config of every later checkpoint, "overrides").
//
//   json history = check_resume(kOp, path, saved, wanted, o.overrides, step, log);
//   config["overrides"] = history;
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::app {

/// `saved` and `wanted`: flat JSON objects of hyper-parameters, keys named
/// like their flags ("batch_size" is --batch-size; "tokens" is --data's
/// length). Keys of `wanted` only are compared (a job leaves out the ones
/// that may change freely, such as fashion-mnist's --epochs). A difference
/// not named in `overrides` ("all": any) throws kiln::Error "[op] --resume
/// PATH: the checkpoint was trained with lr 0.001, this run asks for 0.5
/// (--lr); pass --override lr to ...". Returns the run's override history:
/// `saved_history` (the checkpoint's "overrides", or null) plus one
/// {"name", "from", "to", "step"} per accepted change, each also printed on `log`.
nlohmann::json check_resume(const std::string& op, const std::string& checkpoint, const nlohmann::json& saved,
                            const nlohmann::json& wanted, const std::vector<std::string>& overrides,
                            const nlohmann::json& saved_history, int64_t step, std::ostream& log);

/// "--batch-size" for "batch_size".
std::string flag_of(const std::string& key);

}  // namespace kiln::app
