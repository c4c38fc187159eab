import type { ComponentChildren } from 'preact';

/** What every form field takes: its id, label, hint and error. */
type FieldProps = { id: string; label: string; hint?: string; error?: string | undefined };

/** The ids an input is described by: its hint and its error. */
function describedBy(id: string, hint?: string, error?: string): string | undefined {
  const ids = [hint ? `${id}-hint` : '', error ? `${id}-error` : ''].filter(Boolean);
  return ids.length ? ids.join(' ') : undefined;
}

/** A label, the control, its hint and its error message (next to the field, announced). */
function FieldFrame({ id, label, hint, error, children }: FieldProps & { children: ComponentChildren }) {
  return (
    <div class={`field${error ? ' field-invalid' : ''}`}>
      <label for={id}>{label}</label>
      {children}
      {hint && (
        <p class="hint" id={`${id}-hint`}>
          {hint}
        </p>
      )}
      {error && (
        <p class="field-error" id={`${id}-error`}>
          {error}
        </p>
      )}
    </div>
  );
}

/** A text or number input. */
export function TextField(
  props: FieldProps & { value: string; onInput: (v: string) => void; type?: string; required?: boolean; inputMode?: 'numeric' | 'text'; autoComplete?: string },
) {
  const { id, hint, error } = props;
  return (
    <FieldFrame {...props}>
      <input
        id={id}
        name={id}
        type={props.type ?? 'text'}
        value={props.value}
        required={props.required}
        inputMode={props.inputMode}
        autoComplete={props.autoComplete ?? 'off'}
        spellcheck={false}
        aria-invalid={error ? 'true' : undefined}
        aria-describedby={describedBy(id, hint, error)}
        onInput={(e) => props.onInput((e.target as HTMLInputElement).value)}
      />
    </FieldFrame>
  );
}

/** A select of fixed options. */
export function SelectField(props: FieldProps & { value: string; options: { value: string; label: string }[]; onChange: (v: string) => void }) {
  const { id, hint, error } = props;
  return (
    <FieldFrame {...props}>
      <select
        id={id}
        name={id}
        value={props.value}
        aria-invalid={error ? 'true' : undefined}
        aria-describedby={describedBy(id, hint, error)}
        onChange={(e) => props.onChange((e.target as HTMLSelectElement).value)}
      >
        {props.options.map((o) => (
          <option key={o.value} value={o.value}>
            {o.label}
          </option>
        ))}
      </select>
    </FieldFrame>
  );
}

/** A multi-line text input. */
export function TextAreaField(props: FieldProps & { value: string; onInput: (v: string) => void; rows?: number }) {
  const { id, hint, error } = props;
  return (
    <FieldFrame {...props}>
      <textarea
        id={id}
        name={id}
        rows={props.rows ?? 3}
        value={props.value}
        spellcheck={false}
        aria-invalid={error ? 'true' : undefined}
        aria-describedby={describedBy(id, hint, error)}
        onInput={(e) => props.onInput((e.target as HTMLTextAreaElement).value)}
      />
    </FieldFrame>
  );
}
