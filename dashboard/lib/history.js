// The samples the charts show: the newest `limit` steps, merged from
// /api/v1/history answers by step number. A step number that goes backwards
// means a new run (or a restarted server): the store starts over.

export class History {
  constructor(limit) {
    this.limit = limit;
    this.samples = [];  // oldest first, strictly increasing .step
    this.identityKey = '';
  }

  get lastStep() {
    return this.samples.length ? this.samples[this.samples.length - 1].step : -1;
  }

  get latest() {
    return this.samples.length ? this.samples[this.samples.length - 1] : null;
  }

  // How many of the newest steps to ask for, given the server's current step.
  wanted(currentStep) {
    if (this.samples.length === 0 || currentStep < this.lastStep) return this.limit;
    return Math.min(this.limit, Math.max(0, currentStep - this.lastStep));
  }

  // identity: the answering rank's identity; a different one resets the store.
  merge(identity, steps) {
    const key = identity ? `${identity.job}/${identity.rank}` : '';
    if (key !== this.identityKey) {
      this.samples = [];
      this.identityKey = key;
    }
    let changed = false;
    for (const s of steps || []) {
      if (!s || typeof s.step !== 'number') continue;
      if (s.step > this.lastStep) {
        this.samples.push(s);
        changed = true;
      }
    }
    if (this.samples.length > this.limit) {
      this.samples.splice(0, this.samples.length - this.limit);
    }
    return changed;
  }

  reset() {
    this.samples = [];
  }

  // Column of values: fn(sample, index) for every sample (null when missing).
  column(fn) {
    return this.samples.map((s, i) => {
      const v = fn(s, i);
      return typeof v === 'number' && Number.isFinite(v) ? v : null;
    });
  }
}
