import type { ComponentChildren } from 'preact';
import { href, type Route } from '../router';
import { humanize } from '../format';
import { isPlatformAdmin, type Viewer } from '../viewer';

/** One navigation link, marked current when its page is shown. */
function NavLink({ to, current, children }: { to: Route; current: boolean; children: ComponentChildren }) {
  return (
    <a href={href(to)} aria-current={current ? 'page' : undefined}>
      {children}
    </a>
  );
}

/** The page frame: skip link, banner with navigation and sign-out, and the main landmark. */
export function Layout({ viewer, route, onSignOut, children }: { viewer: Viewer; route: Route; onSignOut: () => void; children: ComponentChildren }) {
  // A tenant token works only in its own tenant: a tenant named in the URL is for platform admins.
  const tenant = !viewer.tenant && 'tenant' in route ? route.tenant : null;
  const onTenantPages = route.page === 'list' || route.page === 'create' || route.page === 'detail';
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById('main')?.focus(); }}>
        Skip to content
      </a>
      <header class="banner">
        <span class="brand">Tenantplane</span>
        <nav aria-label="Main">
          {(viewer.tenant || tenant) && (
            <NavLink to={{ page: 'list', tenant }} current={onTenantPages}>
              Control planes
            </NavLink>
          )}
          {isPlatformAdmin(viewer) && (
            <>
              <NavLink to={{ page: 'datastores' }} current={route.page === 'datastores'}>
                DataStores
              </NavLink>
              <NavLink to={{ page: 'tenants' }} current={route.page === 'tenants'}>
                Tenants
              </NavLink>
            </>
          )}
        </nav>
        <span class="who">
          {viewer.tenant ? `${viewer.tenant} · ` : ''}
          {humanize(viewer.role)}
        </span>
        <button type="button" class="secondary" onClick={onSignOut}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </>
  );
}
