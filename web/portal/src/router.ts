import { useEffect, useState } from 'preact/hooks';

/** The pages, as the URL's hash names them (`#/control-planes/<id>`, …). */
export type Route =
  | { page: 'list'; tenant: string | null }
  | { page: 'create'; tenant: string | null }
  | { page: 'detail'; id: string }
  | { page: 'datastores' }
  | { page: 'tenants' }
  | { page: 'home' }
  | { page: 'missing'; path: string };

/** Reads a hash such as `#/control-planes?tenant=acme`. */
export function parseRoute(hash: string): Route {
  const [path = '', query = ''] = hash.replace(/^#/, '').split('?');
  const tenant = new URLSearchParams(query).get('tenant');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return { page: 'home' };
  if (parts[0] === 'control-planes') {
    if (parts.length === 1) return { page: 'list', tenant };
    if (parts[1] === 'new' && parts.length === 2) return { page: 'create', tenant };
    if (parts.length === 2) return { page: 'detail', id: parts[1]! };
  }
  if (parts[0] === 'admin' && parts[1] === 'datastores') return { page: 'datastores' };
  if (parts[0] === 'admin' && parts[1] === 'tenants') return { page: 'tenants' };
  return { page: 'missing', path };
}

/** The hash of a route. */
export function href(route: Route): string {
  const withTenant = (path: string, tenant: string | null) =>
    tenant ? `${path}?tenant=${encodeURIComponent(tenant)}` : path;
  switch (route.page) {
    case 'list':
      return withTenant('#/control-planes', route.tenant);
    case 'create':
      return withTenant('#/control-planes/new', route.tenant);
    case 'detail':
      return `#/control-planes/${encodeURIComponent(route.id)}`;
    case 'datastores':
      return '#/admin/datastores';
    case 'tenants':
      return '#/admin/tenants';
    case 'home':
      return '#/';
    case 'missing':
      return `#/${route.path}`;
  }
}

/** Goes to a route. */
export function navigate(route: Route): void {
  location.hash = href(route);
}

/** The current route, following hash changes. */
export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const update = () => setRoute(parseRoute(location.hash));
    addEventListener('hashchange', update);
    return () => removeEventListener('hashchange', update);
  }, []);
  return route;
}
