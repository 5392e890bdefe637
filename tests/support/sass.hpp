#pragma once
// Disassembling cubins with cuobjdump (from $ATTNJIT_CUOBJDUMP, PATH, or the toolkit).
// Without it the SASS checks print a visible skip — unless ATTNJIT_REQUIRE_SASS=1 (CI
// and the GPU script set it), where a missing disassembler fails the test.
#include <optional>
#include <string>
#include <vector>

namespace attnjit::test {

// The SASS text of `cubin`, or nullopt (after a WARN or FAIL) when no cuobjdump works.
std::optional<std::string> disassemble(const std::vector<char>& cubin);

// Occurrences of an instruction mnemonic prefix (e.g. "HGMMA", "UTMALDG", "LDL") as
// an opcode in SASS text.
int count_opcode(const std::string& sass, const std::string& opcode);

}  // namespace attnjit::test
