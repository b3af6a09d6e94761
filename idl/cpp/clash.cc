#include "idl/cpp/clash.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "idl/cpp/cpp_names.h"

namespace naarpc::idl::internal {
namespace {

constexpr int kFixed = -1;    // declared by the generated code itself
constexpr int kOutside = -2;  // declared outside it (std, naarpc, uint8_t, ...)
constexpr int kRoot = -1;     // scope index: outside every generated scope

struct Origin {
  std::string what;  // "routine 'Add'"
  Location at;
  std::string field;
};

struct Decl {
  std::string name;
  int origin;
  std::string role;  // "method of FooClient"
};

struct Lookup {
  std::string name;
  int target_scope;   // where the intended declaration is (kRoot: outside)
  int target_origin;  // its origin (kFixed, kOutside or an IDL declaration)
  std::string target_role;
  std::string context;  // "FooClient::Add"
};

struct Scope {
  std::string title;
  int parent;
  std::vector<Decl> decls;
  std::vector<Lookup> uses;
};

class Model {
 public:
  int AddOrigin(std::string what, const NameInfo& info) {
    origins_.push_back({std::move(what), info.at, info.field});
    return static_cast<int>(origins_.size()) - 1;
  }
  int AddScope(std::string title, int parent) {
    scopes_.push_back({std::move(title), parent, {}, {}});
    return static_cast<int>(scopes_.size()) - 1;
  }
  void Declare(int scope, const std::string& name, int origin, std::string role) {
    if (name.empty()) return;
    scopes_[scope].decls.push_back({name, origin, std::move(role)});
  }
  void Use(int scope, const std::string& name, int target_scope, int target_origin,
           std::string target_role) {
    scopes_[scope].uses.push_back(
        {name, target_scope, target_origin, std::move(target_role), scopes_[scope].title});
  }
  // Names from outside the generated code (std, naarpc, fixed-width types).
  void UseOutside(int scope, std::initializer_list<std::string_view> names) {
    for (std::string_view n : names) Use(scope, std::string(n), kRoot, kOutside, "");
  }
  // Copies a base class's declarations into a derived class (lookup sees both).
  void Inherit(int derived, int base) {
    for (const Decl& d : scopes_[base].decls) {
      scopes_[derived].decls.push_back({d.name, d.origin, d.role});
    }
  }
  const std::vector<Decl>& decls(int scope) const { return scopes_[scope].decls; }

  void Check(Sink& sink) const;
  std::string Describe() const;

 private:
  std::string Where(int origin) const {
    return origins_[origin].what + " at line " + std::to_string(origins_[origin].at.line);
  }
  bool Earlier(int a, int b) const {
    if (a < 0 || b < 0) return a < b;
    const Location& x = origins_[a].at;
    const Location& y = origins_[b].at;
    return std::tie(x.line, x.column, a) < std::tie(y.line, y.column, b);
  }
  void Report(Sink& sink, int origin, const std::string& message) const {
    sink.Error(origins_[origin].at, origins_[origin].field, message);
  }

  std::vector<Origin> origins_;
  std::vector<Scope> scopes_;
};

void Model::Check(Sink& sink) const {
  std::set<std::pair<int, std::string>> bad_names;
  std::set<std::tuple<int, int, std::string>> reported;
  const auto generates = [&](int origin, const Decl& d) {
    return origins_[origin].what + " generates '" + d.name + "' (" + d.role + ")";
  };
  // Keywords and macros.
  for (const Scope& s : scopes_) {
    for (const Decl& d : s.decls) {
      if (d.origin < 0 || !bad_names.insert({d.origin, d.name}).second) continue;
      if (IsReservedWord(d.name)) {
        Report(sink, d.origin, generates(d.origin, d) + ", a C++ keyword or reserved name");
      } else if (IsHeaderMacro(d.name)) {
        Report(sink, d.origin,
               generates(d.origin, d) + ", a macro of the headers the generated code "
                                        "includes (C library, C++ library or gMock); rename it");
      }
    }
  }
  // Two declarations of one name in one scope.
  for (const Scope& s : scopes_) {
    std::map<std::string, const Decl*> first;
    for (const Decl& d : s.decls) {
      auto [it, inserted] = first.emplace(d.name, &d);
      if (inserted || it->second->origin == d.origin) continue;
      const Decl* a = it->second;
      const Decl* b = &d;
      if (Earlier(b->origin, a->origin)) std::swap(a, b);
      if (b->origin < 0) continue;  // two fixed names: the templates' business
      if (!reported.insert({a->origin, b->origin, d.name}).second) continue;
      std::string msg = generates(b->origin, *b);
      if (a->origin == kFixed) {
        msg += ", which the generated code itself declares there (" + a->role + ")";
      } else {
        msg += ", which " + Where(a->origin) + " also generates";
        if (a->role != b->role) msg += " (" + a->role + ")";
      }
      Report(sink, b->origin, msg);
    }
  }
  // A declaration that hides a name a generated body or signature uses.
  // Each scope's declarations by name: a lookup sees only its name's (the
  // namespace holds every service's, so scanning them all was quadratic).
  std::vector<std::unordered_map<std::string_view, std::vector<const Decl*>>> by_name(
      scopes_.size());
  for (size_t x = 0; x < scopes_.size(); ++x) {
    for (const Decl& d : scopes_[x].decls) by_name[x][d.name].push_back(&d);
  }
  const auto named = [&](int scope, const std::string& name) -> const std::vector<const Decl*>& {
    static const std::vector<const Decl*> kNone;
    const auto it = by_name[scope].find(name);
    return it == by_name[scope].end() ? kNone : it->second;
  };
  for (size_t x = 0; x < scopes_.size(); ++x) {
    for (const Lookup& u : scopes_[x].uses) {
      for (int s = static_cast<int>(x); s != kRoot && s != u.target_scope; s = scopes_[s].parent) {
        for (const Decl* dp : named(s, u.name)) {
          const Decl& d = *dp;
          if (d.origin == u.target_origin) continue;
          const int at = d.origin >= 0 ? d.origin : u.target_origin;
          if (at < 0) continue;
          if (!reported.insert({d.origin, u.target_origin, d.name}).second) continue;
          const Decl* target = nullptr;
          if (u.target_scope != kRoot) {
            for (const Decl* t : named(u.target_scope, u.name)) {
              if (t->origin == u.target_origin) target = t;
            }
          }
          const std::string target_role = target ? target->role : u.target_role;
          std::string msg;
          if (d.origin >= 0) {
            msg = generates(d.origin, d) + ", which hides ";
            if (u.target_origin >= 0) {
              msg += "'" + u.name + "' (" + target_role + ", from " + Where(u.target_origin) + ")";
            } else if (u.target_origin == kFixed) {
              msg += "the generated '" + u.name + "' (" + target_role + ")";
            } else {
              msg += "'" + u.name + "' (declared outside the generated code)";
            }
            msg += " in " + u.context;
          } else {
            msg = origins_[u.target_origin].what + " generates '" + u.name + "' (" + target_role +
                  "), which " + d.role + " hides in " + u.context;
          }
          Report(sink, at, msg);
        }
      }
    }
  }
}

std::string Model::Describe() const {
  std::string out;
  for (const Scope& s : scopes_) {
    out += "scope " + s.title;
    if (s.parent != kRoot) out += " (in " + scopes_[s.parent].title + ")";
    out += "\n";
    for (const Decl& d : s.decls) {
      out += "  decl " + d.name + " : " + d.role + " <- " +
             (d.origin >= 0 ? origins_[d.origin].what : std::string("generated")) + "\n";
    }
    for (const Lookup& u : s.uses) {
      out += "  use " + u.name + " -> " +
             (u.target_scope == kRoot ? std::string("outside") : scopes_[u.target_scope].title) +
             "\n";
    }
  }
  return out;
}

void UseElementTypes(Model& m, int scope, const Routine& r) {
  for (const Param& p : r.params) {
    std::string_view cpp = Describe(p.type).cpp;
    if (cpp.substr(0, 5) == "std::") cpp = "std";
    m.UseOutside(scope, {cpp});
  }
  for (const Internal& i : r.internals) {
    std::string_view cpp = Describe(i.type).cpp;
    if (cpp.substr(0, 5) == "std::") cpp = "std";
    m.UseOutside(scope, {cpp});
  }
}

void BuildService(Model& m, int ns, const Service& s, const ServiceNames& sn) {
  if (!sn.name.ok) return;
  const int oS = m.AddOrigin("service '" + s.name + "'", sn.name);
  const Service::Cpp& c = s.cpp;
  m.Declare(ns, c.error_enum, oS, "enum class");
  m.Declare(ns, c.error_name_function, oS, "function");
  m.Declare(ns, c.error_from_status_function, oS, "function");
  m.Declare(ns, c.client_interface, oS, "class");
  m.Declare(ns, c.client, oS, "class");
  m.Declare(ns, c.service, oS, "class");
  m.Declare(ns, c.mock, oS, "mock class");
  m.Declare(ns, c.channel_client, oS, "class");
  m.UseOutside(ns, {"naarpc", "std", "uint8_t"});

  // enum class <S>Error
  const int en = m.AddScope("enum class " + c.error_enum, ns);
  m.Declare(en, "kOk", kFixed, "enumerator kOk for status 0");
  for (size_t k = 0; k < s.errors.size() && k < sn.errors.size(); ++k) {
    if (!sn.errors[k].ok) continue;
    const ErrorCode& e = s.errors[k];
    const int oE = m.AddOrigin("error '" + e.name + "'", sn.errors[k]);
    m.Declare(en, e.enumerator, oE, "enumerator of " + c.error_enum);
  }
  for (const char* fn : {"ErrorName", "ErrorFromStatus"}) {
    const int f = m.AddScope("function " + s.name + fn, ns);
    m.Declare(f, "status", kFixed, "argument status");
    m.UseOutside(f, {"naarpc", "uint8_t"});
    m.Use(f, c.error_enum, ns, oS, "enum class");
  }

  std::vector<int> oR(s.routines.size(), kFixed);
  std::vector<std::vector<int>> oP(s.routines.size()), oI(s.routines.size());
  for (size_t ri = 0; ri < s.routines.size() && ri < sn.routines.size(); ++ri) {
    const Routine& r = s.routines[ri];
    const RoutineNames& rn = sn.routines[ri];
    if (!rn.name.ok) continue;
    oR[ri] = m.AddOrigin("routine '" + r.name + "'", rn.name);
    for (size_t k = 0; k < r.params.size() && k < rn.params.size(); ++k) {
      oP[ri].push_back(rn.params[k].ok ? m.AddOrigin("parameter '" + r.params[k].name +
                                                         "' of '" + r.name + "'",
                                                     rn.params[k])
                                       : kFixed);
    }
    for (size_t k = 0; k < r.internals.size() && k < rn.internals.size(); ++k) {
      oI[ri].push_back(rn.internals[k].ok
                           ? m.AddOrigin("internal region '" + r.internals[k].name + "' of '" +
                                             r.name + "'",
                                         rn.internals[k])
                           : kFixed);
    }
  }
  const auto routine_ok = [&](size_t ri) { return oR[ri] != kFixed; };

  // class <S>ClientInterface
  const std::string ci_name = c.client_interface;
  const int ci = m.AddScope("class " + ci_name, ns);
  m.Declare(ci, ci_name, oS, "the name of class " + ci_name);
  m.UseOutside(ci, {"naarpc", "std", "uint8_t"});
  for (size_t ri = 0; ri < s.routines.size(); ++ri) {
    if (!routine_ok(ri)) continue;
    const Routine::Cpp& rc = s.routines[ri].cpp;
    m.Declare(ci, rc.function_code_constant, oR[ri], "constant of " + ci_name);
    m.Declare(ci, rc.default_deadline_constant, oR[ri], "constant of " + ci_name);
    m.Declare(ci, rc.method, oR[ri], "method of " + ci_name);
    m.Declare(ci, rc.async_method, oR[ri], "method of " + ci_name);
  }

  // class <S>Client : <S>ClientInterface
  const std::string cl_name = c.client;
  const int cl = m.AddScope("class " + cl_name, ns);
  m.Inherit(cl, ci);
  m.Declare(cl, cl_name, oS, "the name of class " + cl_name);
  m.Declare(cl, "engine_", kFixed, "member engine_ of " + cl_name);
  m.UseOutside(cl, {"naarpc", "std", "size_t", "uint16_t"});
  const int ctor = m.AddScope("the constructor of " + cl_name, cl);
  for (const char* a : {"transport", "host", "port", "options"}) {
    m.Declare(ctor, a, kFixed, std::string("argument ") + a);
  }
  m.UseOutside(ctor, {"naarpc", "std", "uint16_t"});
  m.Use(ctor, "engine_", cl, kFixed, "member");

  // class <S>ChannelClient : <S>ClientInterface (channel_client.h.j2; its
  // members are kChannelClientMembers, checked against the template by
  // //tests/idl:clash_test)
  const std::string cc_name = c.channel_client;
  const int cc = m.AddScope("class " + cc_name, ns);
  m.Inherit(cc, ci);
  m.Declare(cc, cc_name, oS, "the name of class " + cc_name);
  for (std::string_view member : kChannelClientMembers) {
    m.Declare(cc, std::string(member), kFixed, "member " + std::string(member) + " of " + cc_name);
  }
  m.UseOutside(cc, {"naarpc", "std", "size_t", "uint64_t"});
  const int cc_ctor = m.AddScope("the constructor of " + cc_name, cc);
  for (const char* a : {"transport", "channel", "options"}) {
    m.Declare(cc_ctor, a, kFixed, std::string("argument ") + a);
  }
  m.UseOutside(cc_ctor, {"naarpc", "std"});
  m.Use(cc_ctor, "stubs_", cc, kFixed, "member");

  const std::string sv_name = c.service;
  const int sv = m.AddScope("class " + sv_name, ns);
  m.Declare(sv, sv_name, oS, "the name of class " + sv_name);
  m.Declare(sv, "Handle", kFixed, "method Handle, the NaaHandler dispatcher");
  m.Declare(sv, "KernelTimeout", kFixed, "method NaaHandler::KernelTimeout");
  m.Declare(sv, "service_name", kFixed, "method ServiceHandler::service_name");
  m.Declare(sv, "function_codes", kFixed, "method ServiceHandler::function_codes");
  m.UseOutside(sv, {"naarpc", "std", "uint8_t"});
  m.Use(sv, c.error_enum, ns, oS, "enum class");  // the kernels' return type
  const int handle = m.AddScope(sv_name + "::Handle", sv);
  m.Declare(handle, "call", kFixed, "argument call");
  m.UseOutside(handle, {"naarpc"});
  const int kt = m.AddScope(sv_name + "::KernelTimeout", sv);
  m.Declare(kt, "function_code", kFixed, "argument function_code");
  m.UseOutside(kt, {"std", "uint8_t"});
  const int fc = m.AddScope(sv_name + "::function_codes", sv);
  m.Declare(fc, "kCodes", kFixed, "local kCodes");
  m.UseOutside(fc, {"std", "uint8_t"});

  // class Mock<S>Client : <S>ClientInterface (the _mock header)
  const std::string mk_name = c.mock;
  const int mk = m.AddScope("class " + mk_name, ns);
  m.Inherit(mk, ci);
  m.Declare(mk, mk_name, oS, "the name of class " + mk_name);
  m.UseOutside(mk, {"naarpc", "std"});

  for (size_t ri = 0; ri < s.routines.size(); ++ri) {
    if (!routine_ok(ri)) continue;
    const Routine& r = s.routines[ri];
    const Routine::Cpp& rc = r.cpp;
    const int o = oR[ri];
    const auto param_ok = [&](size_t k) { return k < oP[ri].size() && oP[ri][k] != kFixed; };

    // File scope of the .cc: the routine's descriptor and argument helper
    // (members naarpc_desc and naarpc_args; the helper's arguments are the
    // stub's, its lambdas' naarpc_c).
    m.Declare(ns, rc.routine_struct, o, "file-scope struct (in the .cc)");
    const int rs = m.AddScope("struct " + rc.routine_struct, ns);
    for (size_t k = 0; k < r.params.size(); ++k) {
      if (param_ok(k)) {
        m.Declare(rs, r.params[k].name, oP[ri][k],
                  "argument of " + rc.routine_struct + "::naarpc_args");
      }
    }
    m.UseOutside(rs, {"naarpc", "std"});
    UseElementTypes(m, rs, r);
    m.Use(rs, c.client, ns, oS, "class");
    m.Use(rs, c.error_name_function, ns, oS, "function");
    m.Use(ctor, rc.pool_member, cl, o, "member");
    m.Use(ctor, rc.routine_struct, ns, o, "file-scope struct");

    // Client members.
    m.Declare(cl, rc.call_class, o, "nested class of " + cl_name);
    m.Declare(cl, rc.new_call, o, "method of " + cl_name);
    m.Declare(cl, rc.pool_member, o, "member of " + cl_name);
    // Stub signatures (interface, client, .cc) and bodies.
    struct Signature {
      std::string title;
      bool done;
      bool sync;
      bool convenience;  // a routine with streams: the span/vector form
    };
    std::vector<Signature> signatures = {
        {cl_name + "::" + rc.method, false, true, false},
        {cl_name + "::" + rc.async_method, false, false, false},
        {cl_name + "::" + rc.async_method + " (with done)", true, false, false}};
    if (r.has_streams()) {  // + the span/vector forms of the streaming overloads
      signatures.push_back({cl_name + "::" + rc.method + " (span/vector form)", false, true, true});
      signatures.push_back({cl_name + "::" + rc.async_method + " (span/vector form)", false,
                            false, false});
      signatures.push_back({cl_name + "::" + rc.async_method + " (span/vector form, with done)",
                            true, false, false});
    }
    for (const Signature& sig : signatures) {
      const int f = m.AddScope(sig.title, cl);
      for (size_t k = 0; k < r.params.size(); ++k) {
        if (param_ok(k)) m.Declare(f, r.params[k].name, oP[ri][k], "argument of " + sig.title);
      }
      m.Declare(f, "deadline", kFixed, "argument deadline");
      if (sig.done) m.Declare(f, "done", kFixed, "argument done");
      m.UseOutside(f, {"naarpc", "std"});
      UseElementTypes(m, f, r);
      m.Use(f, rc.default_deadline_constant, cl, o, "constant");  // default argument
      if (sig.convenience) {
        for (size_t k = 0; k < r.params.size(); ++k) {
          if (param_ok(k) && r.params[k].is_stream()) {
            m.Declare(f, "naarpc_s_" + r.params[k].name, oP[ri][k], "local of " + sig.title);
          }
        }
        m.Use(f, rc.method, cl, o, "method");  // the streaming overload
      } else if (sig.sync) {
        for (const char* local : {"naarpc_call", "naarpc_c", "naarpc_out", "naarpc_end"}) {
          m.Declare(f, local, kFixed, std::string("local ") + local);
        }
        m.Use(f, rc.new_call, cl, o, "method");
        m.Use(f, rc.call_class, cl, o, "nested class");
        m.Use(f, rc.routine_struct, ns, o, "file-scope struct");
      } else {
        m.Use(f, "engine_", cl, kFixed, "member");
        m.Use(f, rc.method, cl, o, "method");
        m.Use(f, rc.pool_member, cl, o, "member");
        m.Use(f, rc.routine_struct, ns, o, "file-scope struct");
      }
    }
    // <S>ChannelClient's stubs: the same signatures; the bodies call the
    // stubs with lambdas over the arguments.
    for (const Signature& sig : signatures) {
      const std::string title = cc_name + sig.title.substr(cl_name.size());
      const int f = m.AddScope(title, cc);
      for (size_t k = 0; k < r.params.size(); ++k) {
        if (param_ok(k)) m.Declare(f, r.params[k].name, oP[ri][k], "argument of " + title);
      }
      m.Declare(f, "deadline", kFixed, "argument deadline");
      if (sig.done) m.Declare(f, "done", kFixed, "argument done");
      for (const char* local : {"naarpc_c", "naarpc_d", "naarpc_done", "naarpc_promise",
                                "naarpc_future", "naarpc_s"}) {
        m.Declare(f, local, kFixed, std::string("local ") + local);
      }
      m.UseOutside(f, {"naarpc", "std"});
      UseElementTypes(m, f, r);
      m.Use(f, rc.default_deadline_constant, cc, o, "constant");  // default argument
      m.Use(f, "stubs_", cc, kFixed, "member");
      m.Use(f, "key_", cc, kFixed, "member");
      m.Use(f, rc.async_method, cc, o, "method");
    }
    const int nc = m.AddScope(cl_name + "::" + rc.new_call, cl);
    m.Declare(nc, "deadline", kFixed, "argument deadline");
    m.Declare(nc, "naarpc_lease", kFixed, "local naarpc_lease");
    m.UseOutside(nc, {"naarpc", "std"});
    m.Use(nc, rc.pool_member, cl, o, "member");
    m.Use(nc, rc.call_class, cl, o, "nested class");
    m.Use(nc, rc.default_deadline_constant, cl, o, "constant");

    // <S>Client::<R>Call, the zero-copy call.
    const std::string rc_name = cl_name + "::" + rc.call_class;
    const int call = m.AddScope("class " + rc_name, cl);
    m.Declare(call, rc.call_class, o, "the name of class " + rc_name);
    m.Declare(call, "Invoke", kFixed, "method Invoke of " + rc_name);
    m.Declare(call, "lease_", kFixed, "member lease_ of " + rc_name);
    m.UseOutside(call, {"naarpc", "std", "size_t"});
    UseElementTypes(m, call, r);
    m.Use(call, rc.default_deadline_constant, cl, o, "constant");  // Invoke's default
    const int body = m.AddScope("the methods of " + rc_name, call);
    for (const char* a : {"deadline", "n", "lease", "naarpc_send_lengths", "naarpc_options",
                          "naarpc_status", "naarpc_bad"}) {
      m.Declare(body, a, kFixed, std::string("argument or local ") + a);
    }
    m.UseOutside(body, {"naarpc", "std", "uint64_t", "size_t"});
    m.Use(body, "lease_", call, kFixed, "member");
    m.Use(body, rc.routine_struct, ns, o, "file-scope struct");
    if (r.has_streams()) {
      // Invoke(sources and sinks of the streams..., deadline).
      const int inv = m.AddScope(rc_name + "::Invoke", call);
      for (size_t k = 0; k < r.params.size(); ++k) {
        if (param_ok(k) && r.params[k].is_stream()) {
          m.Declare(inv, r.params[k].name, oP[ri][k], "argument of " + rc_name + "::Invoke");
        }
      }
      for (const char* a : {"deadline", "naarpc_send_lengths", "naarpc_options", "naarpc_status",
                            "naarpc_bad", "naarpc_streams"}) {
        m.Declare(inv, a, kFixed, std::string("argument or local ") + a);
      }
      m.UseOutside(inv, {"naarpc", "std", "uint64_t", "size_t"});
      UseElementTypes(m, inv, r);
      m.Use(inv, "lease_", call, kFixed, "member");
      m.Use(inv, rc.default_deadline_constant, cl, o, "constant");
      m.Use(inv, rc.routine_struct, ns, o, "file-scope struct");
    }
    for (size_t k = 0; k < r.params.size(); ++k) {
      if (!param_ok(k)) continue;
      const Param& p = r.params[k];
      m.Declare(call, p.cpp.accessor, oP[ri][k], "accessor of " + rc_name);
      m.Declare(call, p.cpp.size_getter, oP[ri][k], "size accessor of " + rc_name);
      m.Declare(call, p.cpp.size_setter, oP[ri][k], "size setter of " + rc_name);
    }

    // The skeleton: constant, kernel, dispatcher.
    m.Declare(sv, rc.timeout_constant, o, "constant of " + sv_name);
    m.Declare(sv, rc.method, o, "kernel (pure virtual method) of " + sv_name);
    m.Declare(sv, rc.handler, o, "private method of " + sv_name);
    m.Use(handle, rc.handler, sv, o, "private method");
    m.Use(kt, rc.timeout_constant, sv, o, "constant");
    const int kernel = m.AddScope(sv_name + "::" + rc.method + " (the kernel)", sv);
    m.Declare(kernel, "call", kFixed, "argument call");
    for (size_t k = 0; k < r.params.size(); ++k) {
      if (param_ok(k)) {
        m.Declare(kernel, r.params[k].name, oP[ri][k], "kernel argument of " + sv_name + "::" + rc.method);
      }
    }
    for (size_t k = 0; k < r.internals.size() && k < oI[ri].size(); ++k) {
      if (oI[ri][k] != kFixed) {
        m.Declare(kernel, r.internals[k].name, oI[ri][k],
                  "kernel argument of " + sv_name + "::" + rc.method);
      }
    }
    m.UseOutside(kernel, {"naarpc", "std"});
    UseElementTypes(m, kernel, r);
    const int hb = m.AddScope(sv_name + "::" + rc.handler, sv);
    for (const char* a : {"call", "naarpc_p", "naarpc_status"}) {
      m.Declare(hb, a, kFixed, std::string("argument or local ") + a);
    }
    for (size_t k = 0; k < r.params.size(); ++k) {
      if (!param_ok(k)) continue;
      const Param& p = r.params[k];
      if (p.is_stream()) {
        m.Declare(hb, "naarpc_s_" + p.name, oP[ri][k], "local of " + sv_name + "::" + rc.handler);
        continue;
      }
      m.Declare(hb, "naarpc_v_" + p.name, oP[ri][k], "local of " + sv_name + "::" + rc.handler);
      if (p.variable && p.is_input()) {
        m.Declare(hb, "naarpc_n_" + p.name, oP[ri][k], "local of " + sv_name + "::" + rc.handler);
      }
      if (p.variable && p.is_output()) {
        m.Declare(hb, "naarpc_var_" + p.name, oP[ri][k],
                  "local of " + sv_name + "::" + rc.handler);
      }
    }
    for (size_t k = 0; k < r.internals.size() && k < oI[ri].size(); ++k) {
      if (oI[ri][k] != kFixed) {
        m.Declare(hb, "naarpc_i_" + r.internals[k].name, oI[ri][k],
                  "local of " + sv_name + "::" + rc.handler);
      }
    }
    m.UseOutside(hb, {"naarpc", "std", "uint8_t", "uint64_t"});
    UseElementTypes(m, hb, r);
    m.Use(hb, rc.method, sv, o, "kernel");
    m.Use(hb, c.error_enum, ns, oS, "enum class");
    m.Use(hb, rc.routine_struct, ns, o, "file-scope struct");

    // The mock.
    m.Declare(mk, "gmock_" + rc.method, o, "gMock matcher method of " + mk_name);
    m.Declare(mk, "gmock_" + rc.async_method, o, "gMock matcher method of " + mk_name);
    if (rc.mock_packs_arguments) {
      m.Declare(mk, rc.mock_args_type, o, "argument tuple type of " + mk_name);
      m.Declare(mk, rc.mock_stream_args_type, o, "argument tuple type of " + mk_name);
    }
    struct MockSignature {
      std::string method;
      bool done;
      bool streaming;
    };
    std::vector<MockSignature> mock_signatures = {{rc.method, false, false},
                                                  {rc.async_method, false, false},
                                                  {rc.async_method, true, false}};
    if (r.has_streams()) {
      mock_signatures.push_back({rc.method, false, true});
      mock_signatures.push_back({rc.async_method, false, true});
      mock_signatures.push_back({rc.async_method, true, true});
    }
    for (const MockSignature& sig : mock_signatures) {
      const std::string title = mk_name + "::" + sig.method + (sig.done ? " (with done)" : "") +
                                (sig.streaming ? " (streaming)" : "");
      const int f = m.AddScope(title, mk);
      for (size_t k = 0; k < r.params.size(); ++k) {
        if (param_ok(k)) m.Declare(f, r.params[k].name, oP[ri][k], "argument of " + title);
      }
      m.Declare(f, "deadline", kFixed, "argument deadline");
      if (sig.done) m.Declare(f, "done", kFixed, "argument done");
      m.UseOutside(f, {"naarpc", "std"});
      UseElementTypes(m, f, r);
      if (rc.mock_packs_arguments) {
        m.Use(f, sig.streaming ? rc.mock_stream_args_type : rc.mock_args_type, mk, o,
              "argument tuple type");
        m.Use(f, sig.method, mk, o, "mock method");
      }
    }
  }
}

Model BuildModel(const IdlFile& idl, const FileNames& names) {
  Model m;
  const int ns = m.AddScope("namespace " + (idl.cpp_namespace.empty() ? std::string("?")
                                                                      : idl.cpp_namespace),
                            kRoot);
  for (size_t i = 0; i < idl.services.size() && i < names.services.size(); ++i) {
    BuildService(m, ns, idl.services[i], names.services[i]);
  }
  return m;
}

}  // namespace

void CheckNameClashes(const IdlFile& idl, const FileNames& names, Sink& sink) {
  BuildModel(idl, names).Check(sink);
}

std::string DescribeNameModel(const IdlFile& idl, const FileNames& names) {
  return BuildModel(idl, names).Describe();
}

}  // namespace naarpc::idl::internal
