//! Links libdstrain and records what the C compiler makes of dstrain.h.
//!
//! * `DSTRAIN_LIB_DIR`: directory holding `libdstrain.so` (default: `../../build` relative to
//!   this crate, the repository's CMake build directory, when it holds the library; else an
//!   installed dstrain's `libdir` from `pkg-config dstrain`). Linked with an rpath to it, and
//!   passed on to dependent build scripts as `DEP_DSTRAIN_LIB_DIR`.
//! * `DSTRAIN_INCLUDE_DIR`: directory holding `dstrain/dstrain.h` (default:
//!   `../../capi/include`, or the installed dstrain's `includedir`).
//! * `CC`: the C compiler for the layout probe (default `cc`).
//!
//! The layout probe (`layout_probe.c`) is compiled and run here; its output becomes
//! `$OUT_DIR/c_layout.rs`, which `tests/layout.rs` compares with the Rust declarations. A
//! missing compiler or header does not fail the build (linking does not need them); the
//! reason is recorded instead and the layout test fails with it.
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=layout_probe.c");
    println!("cargo:rerun-if-env-changed=DSTRAIN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=DSTRAIN_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=CC");

    // Without DSTRAIN_LIB_DIR: the repository's build when there is one, else
    // an installed dstrain through pkg-config (its libdir and includedir).
    let repo_build = manifest_dir.join("../../build");
    let installed = if env::var_os("DSTRAIN_LIB_DIR").map_or(true, |v| v.is_empty())
        && !repo_build.join("libdstrain.so").exists()
    {
        pkg_config_dirs()
    } else {
        None
    };
    let (default_lib, default_include) = match &installed {
        Some((lib, include)) => (lib.clone(), include.clone()),
        None => (repo_build, manifest_dir.join("../../capi/include")),
    };
    let lib_dir = dir_from_env("DSTRAIN_LIB_DIR", &default_lib);
    let include_dir = dir_from_env("DSTRAIN_INCLUDE_DIR", &default_include);
    let header = include_dir.join("dstrain").join("dstrain.h");
    println!("cargo:rerun-if-changed={}", header.display());

    if !lib_dir.join("libdstrain.so").exists() {
        println!(
            "cargo:warning=libdstrain.so not found in {}; build it (cmake --build build \
             --target dstrain) or set DSTRAIN_LIB_DIR",
            lib_dir.display()
        );
    }
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=dstrain");
    // Applies to this crate's own tests; dependents get the directory below.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    println!("cargo:lib_dir={}", lib_dir.display());
    println!("cargo:include_dir={}", include_dir.display());
    println!("cargo:rustc-env=DSTRAIN_HEADER_PATH={}", header.display());

    let generated = match probe_layout(&manifest_dir, &include_dir, &header, &out_dir) {
        Ok(pairs) => render(Ok(&pairs)),
        Err(reason) => {
            println!("cargo:warning=dstrain-sys layout probe: {}", reason);
            render(Err(&reason))
        }
    };
    if let Err(e) = fs::write(out_dir.join("c_layout.rs"), generated) {
        println!("cargo:warning=cannot write c_layout.rs: {}", e);
    }
}

/// An installed dstrain's (libdir, includedir) from `pkg-config`, if it knows one.
fn pkg_config_dirs() -> Option<(PathBuf, PathBuf)> {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let variable = |name: &str| -> Option<PathBuf> {
        let out = Command::new("pkg-config")
            .arg(format!("--variable={}", name))
            .arg("dstrain")
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        let dir = text.trim();
        (out.status.success() && !dir.is_empty()).then(|| PathBuf::from(dir))
    };
    let lib = variable("libdir")?;
    let include = variable("includedir")?;
    lib.join("libdstrain.so").exists().then(|| (lib, include))
}

/// `$NAME` as a directory (made absolute when it exists), else `default`.
fn dir_from_env(name: &str, default: &Path) -> PathBuf {
    let dir = env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| default.to_path_buf());
    fs::canonicalize(&dir).unwrap_or(dir)
}

/// Compiles and runs layout_probe.c; returns its (key, value) lines.
fn probe_layout(
    manifest_dir: &Path,
    include_dir: &Path,
    header: &Path,
    out_dir: &Path,
) -> Result<Vec<(String, String)>, String> {
    if !header.exists() {
        return Err(format!(
            "header {} not found; set DSTRAIN_INCLUDE_DIR",
            header.display()
        ));
    }
    let cc = env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".to_string());
    let exe = out_dir.join("layout_probe");
    let output = Command::new(&cc)
        .arg("-std=c99")
        .arg("-Wall")
        .arg("-I")
        .arg(include_dir)
        .arg(manifest_dir.join("layout_probe.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .map_err(|e| format!("cannot run the C compiler `{}`: {}", cc, e))?;
    if !output.status.success() {
        return Err(format!(
            "`{}` failed to compile layout_probe.c: {}",
            cc,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let run = Command::new(&exe)
        .output()
        .map_err(|e| format!("cannot run {}: {}", exe.display(), e))?;
    if !run.status.success() {
        return Err(format!("{} exited with {}", exe.display(), run.status));
    }
    let text = String::from_utf8_lossy(&run.stdout);
    let mut pairs = Vec::new();
    for line in text.lines() {
        // "kind name value": the key is the first two words.
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some(kind), Some(name), Some(value)) => {
                pairs.push((format!("{} {}", kind, name), value.to_string()))
            }
            _ => return Err(format!("unexpected probe output line {:?}", line)),
        }
    }
    Ok(pairs)
}

/// Renders the probe result as Rust source for tests/layout.rs.
fn render(result: Result<&[(String, String)], &str>) -> String {
    let mut s = String::from("// Generated by build.rs from layout_probe.c.\n");
    match result {
        Ok(pairs) => {
            s.push_str("pub const C_LAYOUT_ERROR: Option<&str> = None;\n");
            s.push_str("pub const C_LAYOUT: &[(&str, &str)] = &[\n");
            for (k, v) in pairs {
                let _ = writeln!(s, "    ({:?}, {:?}),", k, v);
            }
            s.push_str("];\n");
        }
        Err(reason) => {
            let _ = writeln!(
                s,
                "pub const C_LAYOUT_ERROR: Option<&str> = Some({:?});",
                reason
            );
            s.push_str("pub const C_LAYOUT: &[(&str, &str)] = &[];\n");
        }
    }
    s
}
