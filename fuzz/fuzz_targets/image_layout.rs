#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tranche_fuzzing::image::image_layout(data));
