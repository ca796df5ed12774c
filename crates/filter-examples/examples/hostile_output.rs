//! Hostile filter: a result the host must refuse.
//!
//! On wasm32 it exports the raw ABI itself (no macro), to return records no honest guest would:
//! - args `huge`: a real 64 MiB output (status 0), for the output cap
//!   (`SERVER_ERROR filter output too large`);
//! - args `wrap`: ptr + len overflows 32 bits;
//! - args `record`: the result record itself straddles the end of memory;
//! - anything else: a result whose `len` runs exactly one byte past the end of memory
//!   (`SERVER_ERROR filter bad result`).
//!
//! Natively only `huge` means something (the caller sees return code 2 when its buffer is
//! smaller); anything else is an error.

/// Size of the `huge` output.
pub const HUGE: usize = 64 << 20;

#[cfg(target_arch = "wasm32")]
mod raw {
    use mnemo_filter_sdk::export::{wasm_finish, wasm_input, wasm_result_record};
    use mnemo_filter_sdk::{Input, ABI_VERSION};

    const PAGE: u64 = 65536;

    #[unsafe(no_mangle)]
    pub extern "C" fn mnemo_abi_version() -> i32 {
        ABI_VERSION as i32
    }

    /// # Safety
    /// Called by the host with the input it wrote into this instance's memory.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn mnemo_filter(in_ptr: i32, in_len: i32) -> i32 {
        // SAFETY: the host wrote `in_len` bytes at `in_ptr`.
        let bytes = unsafe { wasm_input(in_ptr, in_len) };
        let args = bytes
            .and_then(|b| Input::parse(b).ok())
            .map_or(&b""[..], |input| input.args());
        let memory_end = core::arch::wasm32::memory_size(0) as u64 * PAGE;
        match args {
            b"huge" => wasm_finish(0, 0, vec![b'x'; super::HUGE]),
            b"wrap" => wasm_result_record(0, 0, 0xFFFF_FFF0, 0x20),
            b"record" => (memory_end - 8) as u32 as i32,
            _ => {
                // Start inside memory (a real static), end one byte past it.
                static START: [u8; 16] = [0; 16];
                let ptr = START.as_ptr() as usize as u64;
                wasm_result_record(
                    0,
                    0,
                    ptr as u32,
                    (memory_end - ptr + 1).min(u32::MAX as u64) as u32,
                )
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use mnemo_filter_sdk::{export_filter, Input, Output};

    pub fn output(input: &Input, out: &mut Output) -> Result<(), String> {
        match input.args() {
            b"huge" => {
                out.vec_mut().resize(super::HUGE, b'x');
                Ok(())
            }
            _ => Err("hostile_output: bad result records exist only on wasm32".to_string()),
        }
    }

    export_filter!(output);
}
