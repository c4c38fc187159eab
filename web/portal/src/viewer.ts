import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Role } from './graphql/generated';

/** Who is signed in. */
export type Viewer = { tenant: string | null; role: Role; expiresAt: string };

export const ViewerContext = createContext<Viewer | null>(null);

/** The signed-in viewer (pages render only when there is one). */
export function useViewer(): Viewer {
  const viewer = useContext(ViewerContext);
  if (!viewer) throw new Error('no viewer: a page rendered before sign-in');
  return viewer;
}

/** Whether the viewer is a platform admin. */
export function isPlatformAdmin(viewer: Viewer): boolean {
  return viewer.role === 'PLATFORM_ADMIN';
}

/** Whether the viewer may delete control planes and create join tokens (tenant admin or above). */
export function isTenantAdmin(viewer: Viewer): boolean {
  return viewer.role === 'TENANT_ADMIN' || viewer.role === 'PLATFORM_ADMIN';
}

/** Whether the viewer may create and change control planes (tenant member or above). */
export function canWrite(viewer: Viewer): boolean {
  return viewer.role !== 'TENANT_VIEWER';
}

/** The tenant a tenant page works on: the token's own, or the one a platform admin picked. */
export function tenantOf(viewer: Viewer, picked: string | null): string | null {
  return viewer.tenant ?? picked;
}
