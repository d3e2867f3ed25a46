// --mode coverage of backend_ops: every op declared in kernels/backend.h (its `virtual ... name(`
// declarations, less the members that are not ops, listed here) has a row in the op table.
#pragma once
#include <string>
#include <vector>

namespace skew::ops {

/// The virtual member functions declared in the header text (struct Backend's), in order.
std::vector<std::string> parse_virtual_methods(const std::string& header_text);

/// The Backend members that are not ops: queries, memory management, capabilities.
const std::vector<std::string>& non_op_members();

/// Check backend.h under source_dir against the table; print what lacks a row (and a row naming a
/// method backend.h does not declare). Returns the number of problems (0: every op has a row).
int run_coverage_mode(const std::string& source_dir);

}  // namespace skew::ops
