// libFuzzer harness: the hardware-profile reader (YAML or JSON), and the writer on what it
// accepts: a profile written back must read back. Seeds: hwmodel/profiles/*.yaml.
#include "fuzz_input.h"
#include "hwmodel/base/error.h"
#include "hwmodel/hardware_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = batchsim::fuzz::as_file(data, size, "profile.yaml");
  try {
    const batchsim::HardwareProfile p = batchsim::load_hardware_profile(path);
    const std::string text = batchsim::hardware_profile_yaml(p);
    const auto again =
        batchsim::fuzz::as_file(reinterpret_cast<const uint8_t*>(text.data()), text.size(), "written.yaml");
    batchsim::load_hardware_profile(again);  // a UserError here is a writer bug: it escapes
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
