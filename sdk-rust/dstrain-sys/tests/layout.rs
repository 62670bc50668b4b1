//! The Rust declarations against what a C compiler makes of dstrain.h: struct sizes,
//! alignments, field offsets and sizes, enum sizes and signedness, constants, and the set of
//! exported functions. Any drift fails with a list of every differing item.
use dstrain_sys::*;
use std::collections::BTreeMap;
use std::mem::{align_of, size_of, MaybeUninit};

mod c {
    include!(concat!(env!("OUT_DIR"), "/c_layout.rs"));
}

/// Size of the pointee type, from a raw pointer (for field sizes).
fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// Records "offsetof T.f" and "fieldsize T.f" for a field of a #[repr(C)] struct.
macro_rules! field {
    ($out:ident, $t:ident, $f:ident) => {{
        let value = MaybeUninit::<$t>::uninit();
        let base = value.as_ptr();
        // SAFETY: addr_of! computes the field address without reading the uninitialised value.
        let field = unsafe { std::ptr::addr_of!((*base).$f) };
        let offset = field as usize - base as usize;
        $out.insert(
            format!("offsetof {}.{}", stringify!($t), stringify!($f)),
            offset.to_string(),
        );
        $out.insert(
            format!("fieldsize {}.{}", stringify!($t), stringify!($f)),
            pointee_size(field).to_string(),
        );
    }};
}

macro_rules! size_align {
    ($out:ident, $t:ident) => {{
        $out.insert(
            format!("sizeof {}", stringify!($t)),
            size_of::<$t>().to_string(),
        );
        $out.insert(
            format!("alignof {}", stringify!($t)),
            align_of::<$t>().to_string(),
        );
    }};
}

macro_rules! enum_type {
    ($out:ident, $t:ident) => {{
        $out.insert(
            format!("sizeof {}", stringify!($t)),
            size_of::<$t>().to_string(),
        );
        let signed = (0 as $t).checked_sub(1).is_some();
        $out.insert(
            format!("signed {}", stringify!($t)),
            (signed as i32).to_string(),
        );
    }};
}

macro_rules! consts {
    ($out:ident, $($c:ident),* $(,)?) => {{
        $( $out.insert(format!("const {}", stringify!($c)), ($c as i64).to_string()); )*
    }};
}

fn rust_layout() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("sizeof size_t".to_string(), size_of::<usize>().to_string());

    enum_type!(m, dst_status_t);
    enum_type!(m, dst_model_type_t);
    enum_type!(m, dst_loss_type_t);
    enum_type!(m, dst_split_t);
    consts!(
        m,
        DST_OK,
        DST_ERR_INVALID_ARGUMENT,
        DST_ERR_CONFIG,
        DST_ERR_NOT_SUPPORTED,
        DST_ERR_IO,
        DST_ERR_CHECKPOINT,
        DST_ERR_STATE,
        DST_ERR_OUT_OF_MEMORY,
        DST_ERR_COMM,
        DST_ERR_NUMERIC,
        DST_ERR_INTERNAL,
        DST_ERR_ABORTED,
        DST_VERSION_MAJOR,
        DST_VERSION_MINOR,
        DST_VERSION_PATCH,
        DST_VERSION_NUMBER,
        DST_MAX_DIMS,
        DST_STRUCT_SIZE_MAX,
        DST_ENGINE_OPTIONS_V1_SIZE,
        DST_ENGINE_INFO_V1_SIZE,
        DST_BATCH_V1_SIZE,
        DST_TENSOR_INFO_V1_SIZE,
        DST_GENERATOR_OPTIONS_V1_SIZE,
        DST_SAMPLING_V1_SIZE,
        DST_TOKENIZE_OPTIONS_V1_SIZE,
        DST_MODEL_GPT,
        DST_MODEL_SEQUENTIAL,
        DST_LOSS_CROSS_ENTROPY,
        DST_LOSS_MSE,
        DST_SPLIT_TRAIN,
        DST_SPLIT_VAL,
    );
    m.insert(
        "string DST_VERSION_STRING".to_string(),
        DST_VERSION_STRING.to_string(),
    );

    size_align!(m, dst_engine_options_t);
    field!(m, dst_engine_options_t, struct_size);
    field!(m, dst_engine_options_t, config_json);
    field!(m, dst_engine_options_t, config_path);
    field!(m, dst_engine_options_t, model_json);
    field!(m, dst_engine_options_t, model_path);
    field!(m, dst_engine_options_t, total_steps);

    size_align!(m, dst_engine_info_t);
    field!(m, dst_engine_info_t, struct_size);
    field!(m, dst_engine_info_t, model_type);
    field!(m, dst_engine_info_t, loss_type);
    field!(m, dst_engine_info_t, num_parameters);
    field!(m, dst_engine_info_t, train_batch_size);
    field!(m, dst_engine_info_t, micro_batch_size);
    field!(m, dst_engine_info_t, grad_accum_steps);
    field!(m, dst_engine_info_t, dp_size);
    field!(m, dst_engine_info_t, rank);
    field!(m, dst_engine_info_t, world_size);
    field!(m, dst_engine_info_t, seq_len);
    field!(m, dst_engine_info_t, vocab_size);
    field!(m, dst_engine_info_t, input_dim);
    field!(m, dst_engine_info_t, output_dim);
    field!(m, dst_engine_info_t, dp_rank);
    field!(m, dst_engine_info_t, pp_size);
    field!(m, dst_engine_info_t, pp_rank);
    field!(m, dst_engine_info_t, tp_size);
    field!(m, dst_engine_info_t, tp_rank);

    size_align!(m, dst_batch_t);
    field!(m, dst_batch_t, struct_size);
    field!(m, dst_batch_t, n_samples);
    field!(m, dst_batch_t, seq_len);
    field!(m, dst_batch_t, tokens);
    field!(m, dst_batch_t, tokens_count);
    field!(m, dst_batch_t, targets);
    field!(m, dst_batch_t, targets_count);
    field!(m, dst_batch_t, inputs);
    field!(m, dst_batch_t, inputs_count);
    field!(m, dst_batch_t, labels);
    field!(m, dst_batch_t, labels_count);

    size_align!(m, dst_tensor_info_t);
    field!(m, dst_tensor_info_t, struct_size);
    field!(m, dst_tensor_info_t, name);
    field!(m, dst_tensor_info_t, ndim);
    field!(m, dst_tensor_info_t, shape);
    field!(m, dst_tensor_info_t, numel);

    size_align!(m, dst_generator_options_t);
    field!(m, dst_generator_options_t, struct_size);
    field!(m, dst_generator_options_t, checkpoint_dir);
    field!(m, dst_generator_options_t, checkpoint_tag);
    field!(m, dst_generator_options_t, model_json);
    field!(m, dst_generator_options_t, model_path);
    field!(m, dst_generator_options_t, context);
    field!(m, dst_generator_options_t, batch);
    field!(m, dst_generator_options_t, num_threads);
    field!(m, dst_generator_options_t, precision);

    size_align!(m, dst_sampling_t);
    field!(m, dst_sampling_t, struct_size);
    field!(m, dst_sampling_t, max_new_tokens);
    field!(m, dst_sampling_t, temperature);
    field!(m, dst_sampling_t, top_k);
    field!(m, dst_sampling_t, top_p);
    field!(m, dst_sampling_t, seed);
    field!(m, dst_sampling_t, use_cache);
    field!(m, dst_sampling_t, stop_at_eos);

    size_align!(m, dst_tokenize_options_t);
    field!(m, dst_tokenize_options_t, struct_size);
    field!(m, dst_tokenize_options_t, num_threads);
    field!(m, dst_tokenize_options_t, val_fraction);
    field!(m, dst_tokenize_options_t, eos_after_files);
    field!(m, dst_tokenize_options_t, add_special);
    field!(m, dst_tokenize_options_t, chunk_bytes);
    m
}

#[test]
fn struct_layouts_and_constants_match_the_header() {
    if let Some(reason) = c::C_LAYOUT_ERROR {
        panic!(
            "the C layout probe did not run, so the declarations cannot be checked: {}",
            reason
        );
    }
    let from_c: BTreeMap<String, String> = c::C_LAYOUT
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let from_rust = rust_layout();

    let mut problems = Vec::new();
    for (key, c_value) in &from_c {
        match from_rust.get(key) {
            Some(r) if r == c_value => {}
            Some(r) => problems.push(format!("{}: C says {}, Rust says {}", key, c_value, r)),
            None => problems.push(format!(
                "{}: probed in C ({}) but not checked in Rust",
                key, c_value
            )),
        }
    }
    for key in from_rust.keys() {
        if !from_c.contains_key(key) {
            problems.push(format!("{}: checked in Rust but not probed in C", key));
        }
    }
    assert!(
        problems.is_empty(),
        "dstrain-sys does not match dstrain.h ({} problems):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
    assert!(
        from_c.len() > 80,
        "suspiciously few probe values: {}",
        from_c.len()
    );
}

/// Every function the header exports (`DST_API ... name(`), in header order.
fn header_functions() -> Vec<String> {
    let header = std::fs::read_to_string(env!("DSTRAIN_HEADER_PATH"))
        .unwrap_or_else(|e| panic!("cannot read {}: {}", env!("DSTRAIN_HEADER_PATH"), e));
    let mut names = Vec::new();
    for chunk in header.split("DST_API").skip(1) {
        let before_paren = match chunk.find('(') {
            Some(i) => &chunk[..i],
            None => continue,
        };
        let name = before_paren
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("");
        if name.starts_with("dst_") {
            names.push(name.to_string());
        }
    }
    names
}

#[test]
fn every_header_function_is_declared() {
    // Naming each function here makes the test fail to compile if one is missing in Rust.
    let declared: &[(&str, usize)] = &[
        ("dst_status_string", dst_status_string as *const () as usize),
        ("dst_last_error", dst_last_error as *const () as usize),
        ("dst_version", dst_version as *const () as usize),
        (
            "dst_version_number",
            dst_version_number as *const () as usize,
        ),
        (
            "dst_build_info_json",
            dst_build_info_json as *const () as usize,
        ),
        (
            "dst_engine_options_default",
            dst_engine_options_default as *const () as usize,
        ),
        ("dst_engine_create", dst_engine_create as *const () as usize),
        (
            "dst_engine_destroy",
            dst_engine_destroy as *const () as usize,
        ),
        ("dst_engine_abort", dst_engine_abort as *const () as usize),
        (
            "dst_engine_get_info",
            dst_engine_get_info as *const () as usize,
        ),
        ("dst_batch_default", dst_batch_default as *const () as usize),
        (
            "dst_engine_train_batch",
            dst_engine_train_batch as *const () as usize,
        ),
        (
            "dst_engine_eval_batch",
            dst_engine_eval_batch as *const () as usize,
        ),
        (
            "dst_engine_forward_backward",
            dst_engine_forward_backward as *const () as usize,
        ),
        (
            "dst_engine_step_count",
            dst_engine_step_count as *const () as usize,
        ),
        (
            "dst_engine_learning_rate",
            dst_engine_learning_rate as *const () as usize,
        ),
        (
            "dst_engine_loss_scale",
            dst_engine_loss_scale as *const () as usize,
        ),
        (
            "dst_engine_param_count",
            dst_engine_param_count as *const () as usize,
        ),
        (
            "dst_engine_param_info",
            dst_engine_param_info as *const () as usize,
        ),
        (
            "dst_engine_get_param",
            dst_engine_get_param as *const () as usize,
        ),
        (
            "dst_engine_set_param",
            dst_engine_set_param as *const () as usize,
        ),
        (
            "dst_engine_get_grad",
            dst_engine_get_grad as *const () as usize,
        ),
        (
            "dst_engine_save_checkpoint",
            dst_engine_save_checkpoint as *const () as usize,
        ),
        (
            "dst_engine_load_checkpoint",
            dst_engine_load_checkpoint as *const () as usize,
        ),
        (
            "dst_engine_load_weights",
            dst_engine_load_weights as *const () as usize,
        ),
        (
            "dst_engine_metrics_json",
            dst_engine_metrics_json as *const () as usize,
        ),
        (
            "dst_engine_config_json",
            dst_engine_config_json as *const () as usize,
        ),
        (
            "dst_checkpoint_inspect_json",
            dst_checkpoint_inspect_json as *const () as usize,
        ),
        (
            "dst_checkpoint_export_weights",
            dst_checkpoint_export_weights as *const () as usize,
        ),
        (
            "dst_checkpoint_export_hf",
            dst_checkpoint_export_hf as *const () as usize,
        ),
        (
            "dst_engine_monitor_url",
            dst_engine_monitor_url as *const () as usize,
        ),
        (
            "dst_engine_memory_status",
            dst_engine_memory_status as *const () as usize,
        ),
        (
            "dst_estimate_memory_json",
            dst_estimate_memory_json as *const () as usize,
        ),
        (
            "dst_config_file_read",
            dst_config_file_read as *const () as usize,
        ),
        ("dst_io_probe_json", dst_io_probe_json as *const () as usize),
        (
            "dst_comm_bench_json",
            dst_comm_bench_json as *const () as usize,
        ),
        (
            "dst_dataset_open_text",
            dst_dataset_open_text as *const () as usize,
        ),
        (
            "dst_dataset_open_tokens",
            dst_dataset_open_tokens as *const () as usize,
        ),
        (
            "dst_dataset_max_token",
            dst_dataset_max_token as *const () as usize,
        ),
        (
            "dst_dataset_destroy",
            dst_dataset_destroy as *const () as usize,
        ),
        (
            "dst_dataset_num_tokens",
            dst_dataset_num_tokens as *const () as usize,
        ),
        ("dst_dataset_path", dst_dataset_path as *const () as usize),
        ("dst_dataset_batch", dst_dataset_batch as *const () as usize),
        ("dst_dataset_read", dst_dataset_read as *const () as usize),
        (
            "dst_generator_options_default",
            dst_generator_options_default as *const () as usize,
        ),
        (
            "dst_generator_create",
            dst_generator_create as *const () as usize,
        ),
        (
            "dst_generator_destroy",
            dst_generator_destroy as *const () as usize,
        ),
        (
            "dst_generator_info_json",
            dst_generator_info_json as *const () as usize,
        ),
        (
            "dst_generator_logits",
            dst_generator_logits as *const () as usize,
        ),
        (
            "dst_generator_loss",
            dst_generator_loss as *const () as usize,
        ),
        (
            "dst_sampling_default",
            dst_sampling_default as *const () as usize,
        ),
        (
            "dst_generator_generate",
            dst_generator_generate as *const () as usize,
        ),
        (
            "dst_tokenizer_open",
            dst_tokenizer_open as *const () as usize,
        ),
        (
            "dst_tokenizer_destroy",
            dst_tokenizer_destroy as *const () as usize,
        ),
        (
            "dst_tokenizer_info_json",
            dst_tokenizer_info_json as *const () as usize,
        ),
        (
            "dst_tokenizer_encode",
            dst_tokenizer_encode as *const () as usize,
        ),
        (
            "dst_tokenizer_decode",
            dst_tokenizer_decode as *const () as usize,
        ),
        (
            "dst_tokenize_options_default",
            dst_tokenize_options_default as *const () as usize,
        ),
        (
            "dst_tokenize_files",
            dst_tokenize_files as *const () as usize,
        ),
    ];
    let mut in_rust: Vec<&str> = declared.iter().map(|(n, _)| *n).collect();
    let mut in_header = header_functions();
    in_rust.sort_unstable();
    in_header.sort_unstable();
    let missing: Vec<&String> = in_header
        .iter()
        .filter(|n| !in_rust.contains(&n.as_str()))
        .collect();
    let extra: Vec<&&str> = in_rust
        .iter()
        .filter(|n| !in_header.iter().any(|h| h == *n))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "functions in dstrain.h but not declared in dstrain-sys: {:?}; declared but not in the \
         header: {:?}",
        missing,
        extra
    );
    // The symbols resolve in the linked library (non-null addresses).
    assert!(declared.iter().all(|(_, addr)| *addr != 0));
}

#[test]
fn library_matches_header_version() {
    // SAFETY: dst_version/dst_version_number take no arguments and return static data.
    let (number, text) = unsafe {
        let p = dst_version();
        assert!(!p.is_null());
        (
            dst_version_number(),
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned(),
        )
    };
    assert_eq!(
        number, DST_VERSION_NUMBER,
        "library {} vs header {}",
        text, DST_VERSION_STRING
    );
    assert_eq!(text, DST_VERSION_STRING);
}

#[test]
fn defaults_set_struct_sizes() {
    // SAFETY: the _default functions only write the struct they are given.
    unsafe {
        let mut opts = MaybeUninit::<dst_engine_options_t>::uninit();
        dst_engine_options_default(opts.as_mut_ptr());
        let opts = opts.assume_init();
        assert_eq!(opts.struct_size, size_of::<dst_engine_options_t>());
        assert!(opts.config_json.is_null() && opts.model_path.is_null());
        assert_eq!(opts.total_steps, 0);

        let mut batch = MaybeUninit::<dst_batch_t>::uninit();
        dst_batch_default(batch.as_mut_ptr());
        let batch = batch.assume_init();
        assert_eq!(batch.struct_size, size_of::<dst_batch_t>());
        assert!(batch.tokens.is_null() && batch.labels.is_null());
        assert_eq!(batch.n_samples, 0);
    }
}

#[test]
fn status_strings_and_last_error() {
    // SAFETY: handle-free calls; pointers checked before use.
    unsafe {
        let ok = std::ffi::CStr::from_ptr(dst_status_string(DST_OK));
        assert_eq!(ok.to_str().unwrap(), "ok");
        let mut out: *mut dst_engine_t = std::ptr::null_mut();
        let status = dst_engine_create(&mut out, std::ptr::null());
        assert_eq!(status, DST_ERR_INVALID_ARGUMENT);
        assert!(out.is_null());
        let msg = std::ffi::CStr::from_ptr(dst_last_error()).to_string_lossy();
        assert!(msg.contains("options"), "message: {}", msg);
    }
}
