#pragma once
// Process-wide runtime switches.

namespace attnjit {

// Checked mode: ops validate the values that live on the GPU (cache lengths, block-table
// entries, ...) with a small kernel before launching, synchronize, and raise an Error
// naming the first bad one. Off by default (it reads back, so it is a debugging mode);
// the initial value comes from ATTNJIT_CHECK=1. One atomic load per op call.
void set_check_mode(bool on) noexcept;
bool check_mode() noexcept;

}  // namespace attnjit
