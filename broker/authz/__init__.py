"""Authorization applied to requests: the gate every API row runs behind.

`broker.security` holds who is asking and what the ACLs say (below the broker's
context); this package, above the context, applies them to requests: the login
gate and each row's declared rights (`broker.security.requires`) before a
handler runs (`gate`), the shapes in which denied entries are answered beside
the others (`rules`), and one request's view of the authorizer (`access`).
"""
