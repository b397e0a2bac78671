#pragma once
// How `kintsugi plan` and `kintsugi tune` show predictions: a table for people, JSON for
// programs.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kintsugi/plan/cost_model.hpp"

namespace kintsugi::cli {

void print_prediction_table(const std::vector<Prediction>& rows, std::size_t top);
nlohmann::json to_json(const Prediction& p);

}  // namespace kintsugi::cli
