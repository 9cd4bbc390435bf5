import Foundation
import Testing

/// The `developer` policy runs what people run in coding agents' sandboxes,
/// in a granted folder, as root and as an unprivileged user: a venv's pip,
/// a program built by cc and make, node, man. The writer policy refuses
/// every one of those files at execve (EACCES), and `--explain` names the
/// key that would allow it.
@Suite struct DeveloperPolicyTests {
    static func available(_ program: String) -> Bool { FileManager.default.isExecutableFile(atPath: program) }

    /// Whether this system has a manual page for ls (dpkg may exclude /usr/share/man).
    static let manHasLs: Bool = available("/usr/bin/man") && (try? Launcher.program(["/usr/bin/man", "-w", "ls"]).status) == 0

    /// A home and a granted folder owned by `uid`, and the grant's bookmark.
    final class Scene {
        let uid: uid_t?
        let home: Launcher.Home
        var vault: String { home.path + "/vault" }
        var bookmark: String { home.path + "/vault.bookmark" }

        init(as uid: uid_t?, files: [String: String] = [:]) throws {
            self.uid = uid
            home = Launcher.Home(owner: uid ?? getuid())
            try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
            for (name, text) in files {
                try text.write(toFile: vault + "/" + name, atomically: false, encoding: .utf8)
                if text.hasPrefix("#!") { chmod(vault + "/" + name, 0o755) }
            }
            let owner = uid ?? getuid()
            #expect(try Launcher.program(["/bin/chown", "-R", "\(owner):\(owner)", home.path]).status == 0)
            let picked = try Launcher.program(
                (uid.map(Launcher.setpriv) ?? []) + [Launcher.binary, "pick", "--app", "com.example.dev", "--select", vault, "-o", bookmark],
                environment: home.environment)
            try #require(picked.status == 0, "\(picked.stderr)")
        }

        /// `sh -c script` in the grant, under `policy`.
        func run(_ script: String, policy: String = "developer", options: [String] = []) throws -> Launcher.Result {
            try Launcher.run(["/bin/sh", "-c", script], home: home, app: "com.example.dev", as: uid,
                             options: ["--policy", policy, "--grant", "VAULT=\(bookmark)", "--chdir", vault] + options)
        }

        /// The same, unconfined, as the scene's user: to prepare the grant as the user would.
        func host(_ script: String) throws -> Launcher.Result {
            try Launcher.program((uid.map(Launcher.setpriv) ?? []) + ["/bin/sh", "-c", "cd \"$0\" && " + script, vault], environment: home.environment)
        }
    }

    static let program = "#include <stdio.h>\nint main(void) { puts(\"hello from app\"); return 0; }\n"
    static let makefile = "app: app.c\n\tcc -O2 -o app app.c\nrun: app\n\t./app\n"
    static let script = "#!/usr/bin/env node\nconsole.log('node', require('path').basename(__filename))\n"

    @Test(arguments: [nil, 65534] as [uid_t?]) func aVenvsPipRuns(uid: uid_t?) throws {
        let scene = try Scene(as: uid)
        let result = try scene.run("python3 -m venv venv && venv/bin/pip --version && venv/bin/python -c 'import sys; print(sys.prefix)'")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.first?.hasPrefix("pip ") == true, "\(result.output)")
        #expect(result.output.first?.contains(" from \(scene.vault)/venv/") == true, "\(result.output)")
        #expect(result.output.last == scene.vault + "/venv")
    }

    @Test(.enabled(if: available("/usr/bin/cc") && available("/usr/bin/make"), "needs a C compiler (cc) and make"),
          arguments: [nil, 65534] as [uid_t?])
    func ccAndMakeBuildAProgramThatRuns(uid: uid_t?) throws {
        let scene = try Scene(as: uid, files: ["app.c": Self.program, "Makefile": Self.makefile])
        let result = try scene.run("cc -o direct app.c && ./direct && make -s run && ./app")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output == ["hello from app", "hello from app", "hello from app"])
        #expect(result.stderr.isEmpty, "\(result.stderr)")
    }

    @Test(.enabled(if: available("/usr/bin/node"), "node is not installed"), arguments: [nil, 65534] as [uid_t?])
    func nodeRunsAScriptFromTheGrant(uid: uid_t?) throws {
        let scene = try Scene(as: uid, files: ["hello.js": Self.script])
        let result = try scene.run("node hello.js && ./hello.js")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output == ["node hello.js", "node hello.js"])
    }

    /// man formats the page with groff (which reads /etc/groff), and whatis
    /// reads man-db's index in /var/cache/man: under writer, troff warns of a
    /// missing macro file and whatis finds nothing.
    @Test(.enabled(if: manHasLs, "no man, or no manual page for ls on this system"), arguments: [nil, 65534] as [uid_t?])
    func manShowsAPageAndWhatisFindsIt(uid: uid_t?) throws {
        let scene = try Scene(as: uid)
        let result = try scene.run("man ls | grep -c 'list directory contents' && whatis ls")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.output.first.flatMap { Int($0) }.map { $0 >= 1 } == true, "\(result.output)")
        #expect(result.output.dropFirst().contains { $0.hasPrefix("ls (1)") }, "\(result.output)")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
    }

    /// Under writer, each of those files is refused at execve with EACCES
    /// (prepared on the host, as the user would have them), and `--explain`
    /// names the key that allows it.
    @Test(.enabled(if: available("/usr/bin/cc") && available("/usr/bin/node"), "needs cc and node"),
          arguments: [nil, 65534] as [uid_t?])
    func theWriterPolicyExecutesNoneAndExplainNamesTheKey(uid: uid_t?) throws {
        let scene = try Scene(as: uid, files: ["app.c": Self.program, "hello.js": Self.script])
        let prepared = try scene.host("python3 -m venv venv && cc -o app app.c")
        try #require(prepared.status == 0, "\(prepared.stderr)")
        let probe = """
            python3 -c '
            import errno, subprocess, sys
            for path in sys.argv[1:]:
                try: subprocess.run([path], capture_output=True); print(path, "ran")
                except OSError as e: print(path, errno.errorcode[e.errno])
            ' venv/bin/pip ./app ./hello.js
            """
        let refused = try scene.run(probe, policy: "writer", options: ["--explain"])
        #expect(refused.output == ["venv/bin/pip EACCES", "./app EACCES", "./hello.js EACCES"], "\(refused.stderr)")
        // The path as the command named it, from its working directory.
        for name in ["venv/bin/pip", "./app", "./hello.js"] {
            #expect(refused.stderr.contains(
                "execute denied: \(scene.vault)/\(name): is in grant VAULT, and policy builtin:writer lets the command execute no file "
                    + "in its grants or container (org.sandboxed-run.files.execute) [Landlock, execve]"), "\(refused.stderr)")
        }
        let allowed = try scene.run(probe, policy: "developer", options: ["--explain"])
        #expect(allowed.output == ["venv/bin/pip ran", "./app ran", "./hello.js ran"], "\(allowed.stderr)")
        #expect(!allowed.stderr.contains("execute denied"), "\(allowed.stderr)")
    }

    /// The container is the command's HOME and TMPDIR, where `pip install
    /// --user`, `go run` and test runners put what they run: the key covers it.
    @Test func aProgramInTheContainerRunsUnderDeveloperOnly() throws {
        let scene = try Scene(as: nil)
        let script = "cp /bin/true \"$HOME/t\" && cp /bin/true \"$TMPDIR/t\"; \"$HOME/t\"; echo home $?; \"$TMPDIR/t\"; echo tmp $?"
        #expect(try scene.run(script).output == ["home 0", "tmp 0"])
        let refused = try scene.run(script, policy: "writer", options: ["--explain"])
        #expect(refused.output == ["home 126", "tmp 126"])
        #expect(refused.stderr.contains("/t: is in the app's container, and policy builtin:writer lets the command execute no file in its container or grants "
            + "(org.sandboxed-run.files.execute); or install tools in a system path of the policy (org.sandboxed-run.system-paths.read-execute) [Landlock, execve]"),
                "\(refused.stderr)")
    }
}
