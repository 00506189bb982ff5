package client_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
)

// The trajectory routes' answers as web/trajectories.go gives them: JSON
// for the list and recordings, 204 for a result and a delete, the archive
// for an export, the API's error otherwise.
func TestTrajectoryMethods(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.RequestURI())
		body, _ := io.ReadAll(r.Body)
		switch r.Method + " " + r.URL.Path {
		case "GET /v1/trajectories":
			json.NewEncoder(w).Encode(api.TrajectoryList{Trajectories: []api.TrajectoryInfo{{ID: "ep-1", Steps: 3}}, BudgetBytes: 7})
		case "GET /v1/trajectories/ep-1":
			json.NewEncoder(w).Encode(api.Trajectory{TrajectoryInfo: api.TrajectoryInfo{ID: "ep-1"}, StepList: []api.TrajectoryStep{{Step: 1}}})
		case "GET /v1/trajectories/ep-1/export", "GET /v1/episodes/ep-1/trajectory":
			if f := r.URL.Query().Get("format"); f != "" && f != "tar" && f != "zip" {
				w.WriteHeader(http.StatusBadRequest)
				json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: "invalid_request", Field: "format", Message: "format: want tar or zip"}})
				return
			}
			w.Write([]byte("archive bytes"))
		case "PUT /v1/trajectories/ep-1/result":
			if string(body) != `{"result":0.5}` {
				t.Errorf("result body %s", body)
			}
			w.WriteHeader(http.StatusNoContent)
		case "DELETE /v1/trajectories/ep-1":
			w.WriteHeader(http.StatusNoContent)
		case "POST /v1/vms/v1/recording":
			if string(body) != `{"no_video":true}` {
				t.Errorf("recording body %s", body)
			}
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(api.TrajectoryInfo{ID: "tr-0123456789ab", VM: "v1", State: api.TrajectoryRecording})
		case "DELETE /v1/vms/v1/recording":
			json.NewEncoder(w).Encode(api.TrajectoryInfo{ID: "tr-0123456789ab", VM: "v1", State: api.TrajectoryFinished})
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: "not_found", Message: "no " + r.URL.Path}})
		}
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	ctx := t.Context()
	if list, err := c.ListTrajectories(ctx); err != nil || len(list.Trajectories) != 1 || list.BudgetBytes != 7 {
		t.Errorf("ListTrajectories: %+v, %v", list, err)
	}
	if tr, err := c.GetTrajectory(ctx, "ep-1"); err != nil || len(tr.StepList) != 1 || tr.ID != "ep-1" {
		t.Errorf("GetTrajectory: %+v, %v", tr, err)
	}
	for _, export := range []func() (io.ReadCloser, error){
		func() (io.ReadCloser, error) { return c.ExportTrajectory(ctx, "ep-1", api.ExportTar) },
		func() (io.ReadCloser, error) { return c.ExportEpisodeTrajectory(ctx, "ep-1", api.ExportZip) },
	} {
		rc, err := export()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "archive bytes" {
			t.Errorf("export streamed %q", b)
		}
	}
	_, err := c.ExportTrajectory(ctx, "ep-1", "rar")
	if e := apiErr(t, err); e.Status != 400 || e.Field != "format" {
		t.Errorf("a bad format: %+v", e)
	}
	_, err = c.ExportTrajectory(ctx, "nope", "")
	if e := apiErr(t, err); e.Code != "not_found" {
		t.Errorf("an unknown id: %+v", e)
	}
	if err := c.SetTrajectoryResult(ctx, "ep-1", 0.5); err != nil {
		t.Errorf("SetTrajectoryResult (204): %v", err)
	}
	if err := c.DeleteTrajectory(ctx, "ep-1"); err != nil {
		t.Errorf("DeleteTrajectory (204): %v", err)
	}
	if info, err := c.StartRecording(ctx, "v1", api.RecordOptions{NoVideo: true}); err != nil || info.ID != "tr-0123456789ab" {
		t.Errorf("StartRecording: %+v, %v", info, err)
	}
	if info, err := c.StopRecording(ctx, "v1"); err != nil || info.State != api.TrajectoryFinished {
		t.Errorf("StopRecording: %+v, %v", info, err)
	}
	want := "GET /v1/trajectories/ep-1/export?format=tar"
	if asked[2] != want || asked[3] != "GET /v1/episodes/ep-1/trajectory?format=zip" {
		t.Errorf("asked %v, want %s then the episode's route", asked, want)
	}
}
