import { useState } from 'preact/hooks';
import { asApiError, fromUserErrors, type ApiError, type FieldErrors } from '../api/errors';

/** A mutation's outcome as a form shows it. */
export type ActionState = { busy: boolean; problem: ApiError | null; fields: FieldErrors; done: string | null };

/** Runs a mutation that answers `userErrors`; keeps its busy flag, its errors and a success message. */
export function useAction(): [ActionState, (run: () => Promise<{ userErrors: { field: string | null; message: string }[] }>, success: string) => Promise<boolean>] {
  const [state, setState] = useState<ActionState>({ busy: false, problem: null, fields: {}, done: null });
  const run = async (mutate: () => Promise<{ userErrors: { field: string | null; message: string }[] }>, success: string) => {
    setState({ busy: true, problem: null, fields: {}, done: null });
    try {
      const { userErrors } = await mutate();
      const fields = fromUserErrors(userErrors);
      setState({ busy: false, problem: null, fields, done: userErrors.length ? null : success });
      return userErrors.length === 0;
    } catch (e) {
      const problem = asApiError(e);
      setState({ busy: false, problem, fields: problem.fields, done: null });
      return false;
    }
  };
  return [state, run];
}

/** Every field message of an action, in one line (for errors that belong to the whole action). */
export function allMessages(fields: FieldErrors): string | undefined {
  const messages = Object.values(fields);
  return messages.length ? messages.join(' ') : undefined;
}
