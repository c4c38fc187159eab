import { useCallback, useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { request } from './api/client';
import { asApiError, type ApiError } from './api/errors';
import type { TypedDocument } from './graphql/generated';

/** A query's state: its data (kept while reloading), its error, and whether it is loading. */
export type QueryState<R> = { data: R | null; error: ApiError | null; loading: boolean; reload: () => void };

/** Runs a query whenever `key` (its variables, serialized) changes. */
export function useQuery<R, V>(document: TypedDocument<R, V>, variables: V): QueryState<R> {
  const key = JSON.stringify(variables);
  const [state, setState] = useState<{ data: R | null; error: ApiError | null; loading: boolean }>({ data: null, error: null, loading: true });
  const [generation, setGeneration] = useState(0);
  useLayoutEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    request(document, JSON.parse(key) as V).then(
      (data) => live && setState({ data, error: null, loading: false }),
      (e) => live && setState((s) => ({ data: s.data, error: asApiError(e), loading: false })),
    );
    return () => {
      live = false;
    };
  }, [document, key, generation]);
  const reload = useCallback(() => setGeneration((g) => g + 1), []);
  return { ...state, reload };
}

/** The current time, refreshed every `ms` (for relative times). */
export function useNow(ms = 15000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(timer);
  }, [ms]);
  return now;
}

/** Calls `fn` once `value` has stopped changing for `ms`. */
export function useDebounced<T>(value: T, ms: number, fn: (value: T) => void): void {
  const latest = useRef(fn);
  latest.current = fn;
  const key = JSON.stringify(value);
  useEffect(() => {
    const timer = setTimeout(() => latest.current(value), ms);
    return () => clearTimeout(timer);
  }, [key, ms]);
}

/** Sets the document title and moves focus to the page's heading when the page changes. */
export function usePageTitle(title: string): void {
  useEffect(() => {
    document.title = `${title} · Tenantplane`;
  }, [title]);
}
