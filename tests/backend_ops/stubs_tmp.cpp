#include "tests/backend_ops/op_table.h"
namespace skew::ops {
void add_attention_cases(std::vector<Case>&, const TableOptions&) {}
void add_moe_cases(std::vector<Case>&, const TableOptions&) {}
void add_loss_cases(std::vector<Case>&, const TableOptions&) {}
void add_attention_grad_cases(std::vector<GradCase>&) {}
void add_moe_grad_cases(std::vector<GradCase>&) {}
void add_loss_grad_cases(std::vector<GradCase>&) {}
}  // namespace skew::ops
