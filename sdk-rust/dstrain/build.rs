//! Gives this crate's tests, examples and doc tests an rpath to the libdstrain that
//! dstrain-sys linked (`DEP_DSTRAIN_LIB_DIR`, from dstrain-sys's `links = "dstrain"`), so they
//! run without `LD_LIBRARY_PATH`. Programs depending on this crate need their own rpath, an
//! installed library, or `LD_LIBRARY_PATH`.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_DSTRAIN_LIB_DIR");
    if let Some(dir) = std::env::var_os("DEP_DSTRAIN_LIB_DIR") {
        println!(
            "cargo:rustc-link-arg=-Wl,-rpath,{}",
            std::path::Path::new(&dir).display()
        );
    }
}
