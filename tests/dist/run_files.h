// Reading what a `skew train` run wrote, for the multi-rank tests that compare runs: raw file bytes,
// the step log's LM losses, and the tensors of a safetensors checkpoint widened to fp32.
#pragma once
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace skew::test {

/// The bytes of a file ("" when it cannot be read).
inline std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// The LM loss of every logged step of optimizer `opt` in run folder `run`, in order.
inline std::vector<double> step_losses(const std::string& run, const std::string& opt) {
    std::ifstream in(run + "/steps_" + opt + ".jsonl");
    REQUIRE(in.good());
    std::vector<double> out;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) out.push_back(nlohmann::json::parse(line).at("lm_loss").get<double>());
    return out;
}

/// Every bf16 and fp32 tensor of a safetensors file by name, widened to float.
inline std::map<std::string, std::vector<float>> read_safetensors(const std::string& path) {
    const std::string b = read_bytes(path);
    REQUIRE(b.size() > 8);
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    const nlohmann::json h = nlohmann::json::parse(b.substr(8, n));
    const size_t base = 8 + n;
    std::map<std::string, std::vector<float>> out;
    for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        const std::string dt = it.value()["dtype"];
        const size_t s = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
        std::vector<float>& v = out[it.key()];
        if (dt == "BF16") {
            for (size_t i = s; i < e; i += 2) {
                uint16_t h16 = 0;
                std::memcpy(&h16, b.data() + base + i, 2);
                const uint32_t bits = uint32_t(h16) << 16;
                float f = 0;
                std::memcpy(&f, &bits, 4);
                v.push_back(f);
            }
        } else if (dt == "F32") {
            v.resize((e - s) / 4);
            std::memcpy(v.data(), b.data() + base + s, e - s);
        }
    }
    return out;
}

}  // namespace skew::test
