/**
 * An act's notice as it travels, in an account manager's words: on its way
 * ("Allocating 4 of …"), saved on this computer while the server cannot be
 * reached, held behind a conflict or a refused change, waiting for a newer
 * Holdfast, and done once the server has it ("Allocated 4 of …"). Where the
 * act stands is read from the order's own pending acts (`OrderView.pending`,
 * which the badge is made from too), never guessed, so the notice and the
 * badge beside it agree.
 */
import type { OrderView } from './backend';

/** The words for each stage of one act. */
export interface Progress {
  doing: string;
  offline: string;
  held: string;
  newer: string;
  done: string;
}

/** `noun` names the act in a sentence ("Allocation of 4 of …"); `doing` and `done` say it as it happens and once it has. */
export function progress(noun: string, doing: string, done: string): Progress {
  return {
    doing,
    // The status bar's words: "your changes are saved on this computer".
    offline: `${noun} saved on this computer; it will be sent when the server can be reached.`,
    // The badge's and the conflict banner's words: "held until you choose".
    held: `${noun} is held until you choose.`,
    // The editor's note on such an order: "changes you make wait until Holdfast is updated".
    newer: `${noun} waits until Holdfast is updated.`,
    done,
  };
}

/**
 * The act a notice follows until the server has it. `keys` are what the
 * backend returned when it was queued; `seqs` its places in the queue,
 * learned from the first view loaded after it: a decision on a conflict or
 * a refusal may give a kept act a new key (the engine's `rechain`), never a
 * new place. `act` numbers the acts followed, so that a screen can take
 * `state` only from a view it asked for after this act was queued.
 */
export interface Following {
  act: number;
  keys: string[];
  seqs: number[];
  words: Progress;
  state: 'sending' | 'held' | 'newer' | 'done';
  /**
   * It was held, or waited for a newer Holdfast: if it then leaves the
   * queue, the user's choice may have dropped it rather than sent it, so
   * the notice says nothing rather than "done".
   */
  wasHeld: boolean;
}

/** Starts following the act(s) just queued under `keys`. */
export function follow(act: number, keys: string[], words: Progress): Following {
  return { act, keys, seqs: [], words, state: 'sending', wasHeld: false };
}

/** Where the followed act stands in a view loaded after it (null: the notice steps aside). */
export function track(f: Following, v: OrderView): Following | null {
  const mine = v.pending.filter((m) => f.keys.includes(m.idempotency_key) || f.seqs.includes(m.seq));
  // Refused: its card says so, and supersedes the notice.
  if (mine.some((m) => m.status === 'rejected')) return null;
  if (mine.length === 0) return f.wasHeld ? null : { ...f, state: 'done' };
  const seqs = [...new Set([...f.seqs, ...mine.map((m) => m.seq)])];
  // A conflict or a refusal on the order holds its later acts until the user chooses.
  const held = v.badge === 'conflict' || v.badge === 'rejected' || mine.some((m) => m.status !== 'queued');
  const state = v.needs_newer_app ? 'newer' : held ? 'held' : 'sending';
  return { ...f, seqs, state, wasHeld: f.wasHeld || state !== 'sending' };
}

/** The notice for a followed act; `online` as the status bar has it (null: not known yet). */
export function progressWords(f: Following, online: boolean | null | undefined): string {
  if (f.state !== 'sending') return f.words[f.state];
  return online === false ? f.words.offline : f.words.doing;
}
