import { useLayoutEffect, useRef, useState } from 'preact/hooks';
import { request } from './api/client';
import { asApiError, type ApiError } from './api/errors';
import { subscribe } from './api/live';
import {
  ControlPlaneEventsDocument, ControlPlanesDocument, type ControlPlaneEventsSubscription, type ControlPlanePhase,
  type ControlPlanesQuery,
} from './graphql/generated';

/** A list row, as the query and the subscription send it. */
export type Row = ControlPlanesQuery['controlPlanes']['edges'][number]['node'];

/** What the list is filtered by. */
export type Filters = { status: ControlPlanePhase | null; version: string; labels: string };

/** The list's state: rows in order, paging, errors of the page and of the live feed. */
export type LiveList = {
  rows: Row[] | null;
  hasNextPage: boolean;
  endCursor: string | null;
  error: ApiError | null;
  liveError: ApiError | null;
};

/** Page size of the list. */
export const PAGE_SIZE = 20;

/** The query variables of a filtered page. */
function variables(tenant: string, filters: Filters, after: string | null) {
  const labels = filters.labels.split(',').map((l) => l.trim()).filter(Boolean);
  return {
    tenant, first: PAGE_SIZE, after, status: filters.status,
    version: filters.version.trim() || null, labels: labels.length ? labels : null,
  };
}

/** Whether a row passes the filters (new rows from the feed are shown only then). */
function matches(row: Row, filters: Filters): boolean {
  if (filters.status && row.phase !== filters.status) return false;
  if (filters.version.trim() && row.spec.kubernetesVersion !== filters.version.trim()) return false;
  return !filters.labels.trim();
}

/** Applies one event to the rows of the page. */
function applyEvent(list: LiveList, event: ControlPlaneEventsSubscription['controlPlaneEvents'], filters: Filters): LiveList {
  if (!list.rows) return list;
  const row = event.controlPlane;
  const index = list.rows.findIndex((r) => r.id === row.id);
  if (event.kind === 'DELETED') return index < 0 ? list : { ...list, rows: list.rows.filter((r) => r.id !== row.id) };
  if (index >= 0) {
    if (row.updatedAt < list.rows[index]!.updatedAt) return list;
    return { ...list, rows: list.rows.map((r, i) => (i === index ? row : r)) };
  }
  if (!matches(row, filters) || list.hasNextPage) return list;
  if (list.rows.length >= PAGE_SIZE) return { ...list, hasNextPage: true };
  return { ...list, rows: [...list.rows, row] };
}

/** One page of a tenant's control planes, kept current by `controlPlaneEvents` without reloading; a control
 * plane just created (as its mutation answered) shows at once, until the page arrives. */
export function useLiveControlPlanes(tenant: string, filters: Filters, after: string | null, created: Row | null): LiveList {
  const [list, setList] = useState<LiveList>({ rows: created ? [created] : null, hasNextPage: false, endCursor: null, error: null, liveError: null });
  const filtersRef = useRef(filters);
  filtersRef.current = filters;
  const key = JSON.stringify(variables(tenant, filters, after));
  useLayoutEffect(() => {
    let live = true;
    let pending: ControlPlaneEventsSubscription['controlPlaneEvents'][] | null = [];
    const onEvent = (data: ControlPlaneEventsSubscription) => {
      if (pending) pending.push(data.controlPlaneEvents);
      else setList((l) => applyEvent({ ...l, liveError: null }, data.controlPlaneEvents, filtersRef.current));
    };
    const stop = subscribe(ControlPlaneEventsDocument, { tenant }, onEvent, (e) => live && setList((l) => ({ ...l, liveError: e })));
    setList((l) => ({ ...l, rows: l.rows && created && !after ? l.rows : null, error: null }));
    request(ControlPlanesDocument, JSON.parse(key)).then(
      (data) => {
        if (!live) return;
        const page = data.controlPlanes;
        let next: LiveList = { rows: page.edges.map((e) => e.node), hasNextPage: page.pageInfo.hasNextPage, endCursor: page.pageInfo.endCursor, error: null, liveError: null };
        for (const event of pending ?? []) next = applyEvent(next, event, filtersRef.current);
        pending = null;
        setList(next);
      },
      (e) => live && setList((l) => ({ ...l, rows: [], error: asApiError(e) })),
    );
    return () => {
      live = false;
      stop();
    };
  }, [key]);
  return list;
}
