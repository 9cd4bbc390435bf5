@preconcurrency import Glibc
import Foundation
import Sandbox
import SystemPackage
import Testing

/// A symbolic link an app plants in a vault outlives its grant, and any tool
/// the user later points at that vault may follow it. So the shipped
/// policies but `developer` let the command make no links in its container
/// or grants (`org.sandboxed-run.files.symbolic-links`, off), nor move one
/// into place; a policy that needs them (venv, npm) turns the key on.
@Suite(.inBothViews) struct LinkCreationTests {
    static let code = """
        import errno, os, sys
        def attempt(name, call):
            try: call(); print(name, "ok")
            except OSError as e: print(name, errno.errorcode[e.errno])
        vault = sys.argv[1]
        attempt("container", lambda: os.symlink("/etc", "Documents/etc"))
        attempt("grant", lambda: os.symlink(os.path.expanduser("~"), vault + "/Daily"))
        attempt("grant-relative", lambda: os.symlink("..", vault + "/up"))
        attempt("move-a-link", lambda: os.rename(vault + "/users-link-1", vault + "/sub/users-link"))
        attempt("hard-link-a-link", lambda: os.link(vault + "/users-link-2", vault + "/again", follow_symlinks=False))
        attempt("file", lambda: open(vault + "/note.md", "w").close())
        attempt("folder", lambda: os.mkdir(vault + "/new"))
        attempt("remove-a-link", lambda: os.unlink(vault + "/users-link-3"))
        """

    static func run(policy: Policy) throws -> [String] {
        let scratch = Scratch()
        let vault = scratch.path + "/vault"
        try FileManager.default.createDirectory(atPath: vault + "/sub", withIntermediateDirectories: true)
        for index in 1...3 { #expect(symlink("/usr", vault + "/users-link-\(index)") == 0) }  // the user's own, made before the grant
        let fd = try OwnedDescriptor.openPath(FilePath(vault), follow: true)
        return try Run.confined([Run.python, "-c", code, vault], in: scratch, policy: policy) {
            $0.folders = [PathRule(grant: "VAULT", path: FilePath(vault), descriptor: fd, access: .readWrite)]
        }.output
    }

    @Test func theShippedPoliciesLetTheCommandMakeNoLinks() throws {
        // developer is for the tools that make them (venv, npm, git).
        for name in Policy.builtinNames {
            let policy = try #require(Policy.builtin(named: name))
            #expect(policy.symbolicLinks == (name == "developer"), "\(name)")
        }
        #expect(try Self.run(policy: .defaultPolicy) == [
            "container EACCES", "grant EACCES", "grant-relative EACCES", "move-a-link EACCES", "hard-link-a-link EACCES",
            "file ok", "folder ok", "remove-a-link ok",
        ])
    }

    @Test func aPolicyMayAllowThem() throws {
        let allowed = try Self.run(policy: .withLinks)
        #expect(allowed == [
            "container ok", "grant ok", "grant-relative ok", "move-a-link ok", "hard-link-a-link ok",
            "file ok", "folder ok", "remove-a-link ok",
        ], "\(allowed)")
    }
}
