//! Batches: borrowed views of the caller's buffers, handed to the library without copying.
use std::ptr;

use dstrain_sys as sys;

/// One call's samples, borrowing the caller's slices (nothing is copied).
///
/// Build it with [`Batch::tokens`] (GPT), [`Batch::regression`] (sequential model with MSE
/// loss) or [`Batch::classification`] (sequential model with cross-entropy loss). The
/// library checks every buffer's length against `n_samples` and the model's shape and
/// answers [`Status::InvalidArgument`](crate::Status::InvalidArgument) naming the mismatch.
///
/// For [`Engine::train_batch`](crate::Engine::train_batch), `n_samples` must equal
/// [`Info::samples_per_step`](crate::Info::samples_per_step); evaluation and
/// `forward_backward` accept any multiple of the micro-batch size.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    n_samples: usize,
    seq_len: usize,
    tokens: &'a [i32],
    targets: &'a [i32],
    inputs: &'a [f32],
    labels: &'a [f32],
}

impl<'a> Batch<'a> {
    /// A GPT batch: `tokens` and `targets` are `[n_samples, seq_len]` row-major token ids in
    /// `[0, vocab)`; a target of -1 is ignored by the loss.
    pub fn tokens(tokens: &'a [i32], targets: &'a [i32], n_samples: usize, seq_len: usize) -> Self {
        Batch {
            n_samples,
            seq_len,
            tokens,
            targets,
            inputs: &[],
            labels: &[],
        }
    }

    /// A sequential-model batch with MSE loss: `inputs` is `[n_samples, input_dim]`, `labels`
    /// is `[n_samples, output_dim]`.
    pub fn regression(inputs: &'a [f32], labels: &'a [f32], n_samples: usize) -> Self {
        Batch {
            n_samples,
            seq_len: 0,
            tokens: &[],
            targets: &[],
            inputs,
            labels,
        }
    }

    /// A sequential-model batch with cross-entropy loss: `inputs` is `[n_samples,
    /// input_dim]`, `class_ids` is `[n_samples]` with ids in `[0, output_dim)`.
    pub fn classification(inputs: &'a [f32], class_ids: &'a [i32], n_samples: usize) -> Self {
        Batch {
            n_samples,
            seq_len: 0,
            tokens: &[],
            targets: class_ids,
            inputs,
            labels: &[],
        }
    }

    /// Samples in the batch.
    pub fn n_samples(&self) -> usize {
        self.n_samples
    }

    /// Tokens per sample (GPT); 0 for sequential models.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The C view of this batch. Its pointers borrow `self`'s slices, so it must not outlive
    /// them; empty slices become NULL (the library then names the missing buffer).
    pub(crate) fn to_raw(self) -> sys::dst_batch_t {
        fn ptr_or_null<T>(s: &[T]) -> *const T {
            if s.is_empty() {
                ptr::null()
            } else {
                s.as_ptr()
            }
        }
        sys::dst_batch_t {
            struct_size: std::mem::size_of::<sys::dst_batch_t>(),
            n_samples: self.n_samples,
            seq_len: self.seq_len,
            tokens: ptr_or_null(self.tokens),
            tokens_count: self.tokens.len(),
            targets: ptr_or_null(self.targets),
            targets_count: self.targets.len(),
            inputs: ptr_or_null(self.inputs),
            inputs_count: self.inputs.len(),
            labels: ptr_or_null(self.labels),
            labels_count: self.labels.len(),
        }
    }
}

impl<'a, 'b> From<&'b Batch<'a>> for Batch<'a> {
    fn from(batch: &'b Batch<'a>) -> Self {
        *batch
    }
}

/// An owned GPT batch, as returned by [`Dataset::batch`](crate::Dataset::batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBatch {
    /// `[n_samples, seq_len]` token ids.
    pub tokens: Vec<i32>,
    /// `[n_samples, seq_len]` next-token ids (the tokens shifted by one).
    pub targets: Vec<i32>,
    /// Samples (rows).
    pub n_samples: usize,
    /// Tokens per sample (columns).
    pub seq_len: usize,
}

impl TokenBatch {
    /// A [`Batch`] borrowing this batch's buffers.
    pub fn as_batch(&self) -> Batch<'_> {
        Batch::tokens(&self.tokens, &self.targets, self.n_samples, self.seq_len)
    }
}

impl<'a> From<&'a TokenBatch> for Batch<'a> {
    fn from(batch: &'a TokenBatch) -> Self {
        batch.as_batch()
    }
}
